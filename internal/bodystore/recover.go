package bodystore

import (
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tiercache/tiercache/internal/metrics"
)

// Open opens the store in o.Dir, making the directory when it is missing.
// An unusable directory is an error naming --body-dir. It removes temp
// files left by an earlier run, verifies every body file (header, trailer,
// CRC over the body), removes the invalid ones and returns the valid ones
// for the caller to re-insert into L1.
func Open(ctx context.Context, o Options) (*Store, []Recovered, error) {
	if o.Dir == "" {
		return nil, nil, errors.New("--body-dir: must name a directory")
	}
	if o.MaxBytes < 0 {
		return nil, nil, fmt.Errorf("--body-dir-size: must be >= 0, got %d", o.MaxBytes)
	}
	if o.MaxObject < 0 {
		return nil, nil, fmt.Errorf("bodyStore.maxObjectSize: must be >= 0, got %d", o.MaxObject)
	}
	if o.MaxObject == 0 {
		o.MaxObject = DefaultMaxObject
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("--body-dir %s: cannot create it: %w", o.Dir, err)
	}
	if err := probe(o.Dir); err != nil {
		return nil, nil, fmt.Errorf("--body-dir %s: not writable: %w", o.Dir, err)
	}
	s := &Store{
		dir:       filepath.Clean(o.Dir),
		maxBytes:  o.MaxBytes,
		maxObject: o.MaxObject,
		m:         o.Metrics,
		log:       o.Logger,
		lru:       list.New(),
		items:     make(map[[16]byte]*list.Element),
		byPrim:    make(map[uint64]*item),
		writers:   make(map[[16]byte]*Writer),
		kept:      list.New(),
		maxOpen:   maxOpenFor(o.MaxOpen),
	}
	files, err := s.scan(ctx)
	if err != nil {
		return nil, nil, err
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	if s.maxBytes == 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(o.Dir, &st); err != nil {
			return nil, nil, fmt.Errorf("--body-dir %s: reading the free space: %w", o.Dir, err)
		}
		free := int64(st.Bavail) * int64(st.Bsize) // Bsize is int64 on Linux, uint32 elsewhere
		s.maxBytes = (free+total)/100*defaultFreeShare + (free+total)%100*defaultFreeShare/100
	}

	// Oldest first, so the most recently written ends at the front of
	// the LRU; past the budget the oldest go.
	slices.SortFunc(files, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	var evict []string
	files, evict, total = dropReplaced(files, total, func(id [16]byte) string { return s.path(id, bodySuffix) })
	for len(files) > 0 && total > s.maxBytes {
		evict = append(evict, s.path(files[0].id, bodySuffix))
		total -= files[0].size
		files = files[1:]
	}
	s.unlink(evict)
	s.m.BodyStoreEvicted(len(evict))
	out := make([]Recovered, 0, len(files))
	for _, f := range files {
		s.addLocked(&item{id: f.id, size: f.size, body: f.body, crc: f.crc, who: f.who.withKey(f.rec.Key)})
		out = append(out, f.rec)
	}
	s.m.BodyStoreUsage(s.committed, len(s.items))
	return s, out, nil
}

// dropReplaced keeps, of the files (oldest first) recovered for one key,
// only the newest: an older one is a body that was replaced while its
// Remove was lost (a crash), and re-inserting both would let the older
// win or lose by chance. It returns the kept files in order, the paths of
// the dropped ones and the kept bytes.
func dropReplaced(files []found, total int64, path func([16]byte) string) ([]found, []string, int64) {
	seen := make(map[string]bool, len(files))
	var drop []string
	kept := make([]found, 0, len(files))
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		if seen[f.rec.Key] {
			drop = append(drop, path(f.id))
			total -= f.size
			continue
		}
		seen[f.rec.Key] = true
		kept = append(kept, f)
	}
	slices.Reverse(kept)
	return kept, drop, total
}

// probe proves the directory writable by creating and removing a file
// (a temp name, so that a crash in between leaves nothing a restart
// keeps). Permission bits alone do not tell: root ignores them.
func probe(dir string) error {
	var id [16]byte
	_, _ = rand.Read(id[:])
	p := filepath.Join(dir, "probe-"+hex.EncodeToString(id[:8])+tmpSuffix)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte{0})
	cerr := f.Close()
	rerr := os.Remove(p)
	return cmp.Or(werr, cerr, rerr)
}

// errPiece: the file is a piece of a partial response. Parts live in L1
// only, which is empty after a restart, so a piece is an orphan: the scan
// removes it and never returns it, which would let the caller re-insert
// a piece as the complete response of its key.
var errPiece = errors.New("bodystore: a piece file of a partial response")

// found is a body file that verified at start.
type found struct {
	id    [16]byte
	size  int64
	body  int64 // what the trailer records
	crc   uint32
	mtime time.Time
	who   ident
	rec   Recovered
}

// scan removes temp files and invalid body files and returns the valid
// ones.
func (s *Store) scan(ctx context.Context) ([]found, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("--body-dir %s: reading it: %w", s.dir, err)
	}
	var (
		out     []found
		foreign []string
		pieces  int
		buf     = make([]byte, 256<<10)
	)
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := de.Name()
		p := filepath.Join(s.dir, name)
		switch {
		case !de.Type().IsRegular():
			foreign = append(foreign, name)
		case strings.HasSuffix(name, tmpSuffix):
			if err := os.Remove(p); err != nil {
				s.log.Warn("body store: removing a temp file left by an earlier run", "path", p, "error", err)
			}
		case strings.HasSuffix(name, bodySuffix):
			f, err := s.check(ctx, p, name, buf)
			if err == nil {
				out = append(out, f)
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, errPiece) {
				pieces++
				if err := os.Remove(p); err != nil {
					s.log.Warn("body store: removing a piece file left by an earlier run", "path", p, "error", err)
				}
				continue
			}
			s.m.BodyStoreError(metrics.BodyOpRecover)
			s.log.Warn("body store: removing an invalid body file", "path", p, "error", err)
			if err := os.Remove(p); err != nil {
				s.log.Warn("body store: removing an invalid body file", "path", p, "error", err)
			}
		default:
			foreign = append(foreign, name)
		}
	}
	if pieces > 0 {
		s.log.Info("body store: removed the piece files of partial responses left by an earlier run", "count", pieces)
	}
	if len(foreign) > 0 {
		s.log.Warn("body store: leaving alone files it did not write", "dir", s.dir,
			"count", len(foreign), "names", foreign[:min(len(foreign), 10)])
	}
	return out, nil
}

// check verifies one body file in full.
func (s *Store) check(ctx context.Context, path, name string, buf []byte) (found, error) {
	id, ok := parseName(name, bodySuffix)
	if !ok {
		return found{}, fmt.Errorf("%w: name is not <32 hex digits>.body", ErrMismatch)
	}
	f, err := os.Open(path)
	if err != nil {
		return found{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return found{}, err
	}
	size := fi.Size()
	if size < headerSize+tailSize {
		return found{}, fmt.Errorf("%w: file of %d bytes", ErrMismatch, size)
	}
	hdr := buf[:headerSize]
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return found{}, err
	}
	if err := checkHeader(hdr, id); err != nil {
		return found{}, err
	}
	var kh [32]byte
	copy(kh[:], hdr[offHdrKey:])
	if _, err := f.ReadAt(buf[:tailSize], size-tailSize); err != nil {
		return found{}, err
	}
	tl, err := parseTail(buf[:tailSize], size)
	if err != nil {
		return found{}, err
	}
	if tl.trailerLen > maxTrailer {
		return found{}, fmt.Errorf("%w: trailer of %d bytes", ErrMismatch, tl.trailerLen)
	}
	v := make([]byte, tl.trailerLen-tailSize)
	if _, err := f.ReadAt(v, headerSize+tl.size); err != nil {
		return found{}, err
	}
	key, enc, who, err := parseTrailer(v, id, tl)
	if err != nil {
		return found{}, err
	}
	if who.piece {
		// Without its CRC: it goes whatever its bytes are.
		return found{}, errPiece
	}
	if keyHash(key) != kh {
		return found{}, fmt.Errorf("%w: the trailer's key does not hash to the header's", ErrMismatch)
	}
	crc, err := crcOf(ctx, io.NewSectionReader(f, headerSize, tl.size), buf)
	if err != nil {
		return found{}, err
	}
	if crc != tl.crc {
		return found{}, fmt.Errorf("%w: body CRC %08x, trailer says %08x", ErrMismatch, crc, tl.crc)
	}
	return found{id: id, size: size, body: tl.size, crc: tl.crc, mtime: fi.ModTime(), who: who, rec: Recovered{Key: key, Entry: enc}}, nil
}

// crcOf streams r through CRC-32C with buf, stopping when ctx ends.
func crcOf(ctx context.Context, r io.Reader, buf []byte) (uint32, error) {
	var crc uint32
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := r.Read(buf)
		crc = crc32.Update(crc, castagnoli, buf[:n])
		if err == io.EOF {
			return crc, nil
		}
		if err != nil {
			return 0, err
		}
	}
}
