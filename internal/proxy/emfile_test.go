package proxy

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/test/testchild"
)

// A process out of file descriptors (EMFILE: a flood of client
// connections above the container's nofile limit) cannot open a body
// file, though the file is intact. These tests run out of descriptors for
// real: the test binary re-runs itself (the child) with a low soft limit
// on open files, which it then fills with /dev/null, so the limit never
// changes for the rest of the test binary. The child's client and the
// proxy's origin transport keep their connections alive: the requests
// made while no descriptor is free reuse them, as established
// connections do under a flood.

// inDescriptorChild runs the calling test's body (child) alone in a
// child process (testchild), where it may exhaust the process's
// descriptors.
func inDescriptorChild(t *testing.T, child func(t *testing.T)) {
	t.Helper()
	if _, err := os.ReadDir("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	testchild.Run(t, nil, child)
}

// exhaustDescriptors lowers this process's soft limit on open files to a
// little above the descriptors it has open, then opens /dev/null until
// the next open fails with EMFILE. release closes them and restores the
// limit; it may be called more than once, and runs at the test's end.
// Only ever called in a child process (inDescriptorChild).
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, d := range fds {
		if n, err := strconv.Atoi(d.Name()); err == nil && n > highest {
			highest = n
		}
	}
	limit := uint64(highest + 64)
	if limit > old.Cur {
		t.Fatalf("%d descriptors open, soft limit %d", highest, old.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	var fillers []int
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		for _, fd := range fillers {
			_ = syscall.Close(fd)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(release)
	for range limit + 1 { // bounded: at most limit descriptors fit
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == syscall.EMFILE {
			return release
		}
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, fd)
	}
	t.Fatalf("%d opens under a soft limit of %d never failed with EMFILE", len(fillers), limit)
	return nil
}

// TestOutOfDescriptorsAHitKeepsItsEntryAndFile: a hit whose body file
// cannot be opened for lack of descriptors is answered from the origin
// and counted, and the entry and its file stay: once descriptors are free
// again, it is a hit from the same file, with no origin request. A file
// whose descriptor the store keeps is served throughout.
func TestOutOfDescriptorsAHitKeepsItsEntryAndFile(t *testing.T) {
	inDescriptorChild(t, func(t *testing.T) {
		f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
		wantCold, wantKept := bodyFor("/cold", fileSize), bodyFor("/kept", fileSize)
		expectBody(t, f.get("/cold"), 200, "MISS", wantCold)
		cold := f.waitStored(t, "/cold")
		expectBody(t, f.get("/kept"), 200, "MISS", wantKept)
		f.waitStored(t, "/kept")
		// /kept's hit keeps its descriptor; /cold's file was never
		// opened for a hit.
		expectBody(t, f.get("/kept"), 200, "HIT; layer=l1", wantKept)
		origin, opens := f.origin.count(), f.bodyErrors(metrics.BodyOpOpen)

		release := exhaustDescriptors(t)
		expectBody(t, f.get("/kept"), 200, "HIT; layer=l1", wantKept)
		// Passed to the origin (over its kept-alive connection), not
		// stored.
		expectBody(t, f.get("/cold"), 200, "MISS", wantCold)
		if e := f.stored("/cold"); e == nil || e.File == nil || e.File.ID != cold.File.ID {
			release()
			t.Fatalf("out of descriptors, /cold's entry became %+v, want the one with file %x", e, cold.File.ID)
		}
		release()

		if n := f.origin.count(); n != origin+1 {
			t.Fatalf("the origin saw %d requests out of descriptors, want 1 (the pass)", n-origin)
		}
		if got := f.bodyErrors(metrics.BodyOpOpen); got != opens+1 {
			t.Fatalf("body_store_errors_total{op=open} rose by %v, want 1", got-opens)
		}
		expectBody(t, f.get("/cold"), 200, "HIT; layer=l1", wantCold)
		if n := f.origin.count(); n != origin+1 {
			t.Fatalf("the hit after the shortage reached the origin (%d requests since)", n-origin)
		}
		if e := f.stored("/cold"); e == nil || e.File == nil || e.File.ID != cold.File.ID {
			t.Fatalf("/cold's entry after the shortage %+v, want the one with file %x", e, cold.File.ID)
		}
		if b, tmp := f.files(); len(b) != 2 || len(tmp) != 0 {
			t.Fatalf("%d body files and %d temp files, want 2 and none", len(b), len(tmp))
		}
	})
}

// TestOutOfDescriptorsAFillServesTheOriginsStream: a fill that cannot
// create its temp file for lack of descriptors serves its client the
// origin's stream, whole, stores nothing and counts the error; once
// descriptors are free again the next request fills and stores.
func TestOutOfDescriptorsAFillServesTheOriginsStream(t *testing.T) {
	inDescriptorChild(t, func(t *testing.T) {
		f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
		want := bodyFor("/new", fileSize)
		// One fill first, so that the origin transport has a connection
		// to reuse.
		expectBody(t, f.get("/warm"), 200, "MISS", bodyFor("/warm", fileSize))
		f.waitStored(t, "/warm")
		fillWithoutDescriptors(t, f, "/new")
		if b, tmp := f.files(); len(b) != 1 || len(tmp) != 0 {
			t.Fatalf("%d body files and %d temp files, want /warm's alone", len(b), len(tmp))
		}
		expectBody(t, f.get("/new"), 200, "MISS", want)
		f.waitStored(t, "/new")
		expectBody(t, f.get("/new"), 200, "HIT; layer=l1", want)
	})
}

// TestOutOfDescriptorsAFillIntoAFullStoreEvictsNothing: a fill that
// cannot create its temp file for lack of descriptors, while the body
// store is full, serves its client the origin's stream and evicts
// nothing: under a flood of connections, every miss of a large object
// would otherwise empty part of the cache for a file it never gets. Once
// descriptors are free again, the bodies stored before are hits from
// their files, and the next fill makes its room as usual.
func TestOutOfDescriptorsAFillIntoAFullStoreEvictsNothing(t *testing.T) {
	inDescriptorChild(t, func(t *testing.T) {
		// Room for two files (a body, its header and trailer), not three.
		const budget = 2 * (fileSize + 16<<10)
		f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{MaxBytes: budget})
		paths := []string{"/a", "/b"}
		for _, p := range paths {
			expectBody(t, f.get(p), 200, "MISS", bodyFor(p, fileSize))
			f.waitStored(t, p)
		}
		committed, files, _ := f.bodies.Usage()
		if files != 2 || committed+fileSize <= budget {
			t.Fatalf("usage %d bytes in %d files of a %d budget: not full with /a and /b", committed, files, budget)
		}
		origin := f.origin.count()
		fillWithoutDescriptors(t, f, "/new")
		if c, n, r := f.bodies.Usage(); c != committed || n != files || r != 0 {
			t.Fatalf("after the fill without a file: %d bytes in %d files, %d reserved; want %d in %d, none reserved",
				c, n, r, committed, files)
		}
		if b, tmp := f.files(); len(b) != 2 || len(tmp) != 0 {
			t.Fatalf("%d body files and %d temp files, want /a's and /b's", len(b), len(tmp))
		}
		for _, p := range paths {
			expectBody(t, f.get(p), 200, "HIT; layer=l1", bodyFor(p, fileSize))
		}
		if n := f.origin.count(); n != origin+1 {
			t.Fatalf("the origin saw %d requests since the store filled, want 1 (the pass)", n-origin)
		}

		expectBody(t, f.get("/new"), 200, "MISS", bodyFor("/new", fileSize))
		f.waitStored(t, "/new")
		if c, n, r := f.bodies.Usage(); n != 2 || c+r > budget {
			t.Fatalf("after a fill into the full store: %d bytes in %d files, %d reserved; want 2 files within %d",
				c, n, r, budget)
		}
	})
}

// fillWithoutDescriptors asks f for path (a miss) while the process is
// out of descriptors: the client gets the origin's body whole, nothing
// is stored, and one failed create is counted.
func fillWithoutDescriptors(t *testing.T, f *fileFixture, path string) {
	t.Helper()
	creates := f.bodyErrors(metrics.BodyOpCreate)
	release := exhaustDescriptors(t)
	expectBody(t, f.get(path), 200, "MISS", bodyFor(path, fileSize))
	stored := f.stored(path)
	release()
	if stored != nil {
		t.Fatalf("a fill without a file stored %+v", stored)
	}
	if got := f.bodyErrors(metrics.BodyOpCreate); got != creates+1 {
		t.Fatalf("body_store_errors_total{op=create} rose by %v, want 1", got-creates)
	}
}
