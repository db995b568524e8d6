package release

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

// stage is one FROM and what follows it.
type stage struct {
	image, name string
	ins         []instruction
}

// parseDockerfile reads the instructions we rely on; it is not a full
// Dockerfile parser (no heredocs, no escape directive), and fails on what
// it does not understand rather than guessing.
func parseDockerfile(t *testing.T, src string) []stage {
	t.Helper()
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("Dockerfile:%d: FROM %q: expected IMAGE [AS NAME]", in.line, in.args)
			}
			stages = append(stages, s)
			return
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return
			}
			t.Fatalf("Dockerfile:%d: %s before the first FROM", in.line, in.cmd)
		}
		if strings.Contains(in.args, "<<") {
			t.Fatalf("Dockerfile:%d: heredocs are not understood by this test", in.line)
		}
		last := &stages[len(stages)-1]
		last.ins = append(last.ins, in)
	}
	for i, l := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			start = i + 1
		} else if strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

// goDirective returns the version of go.mod's go directive.
func goDirective(t *testing.T, gomod string) string {
	t.Helper()
	for _, l := range strings.Split(gomod, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "go" {
			return f[1]
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dockerImage is what the Dockerfile says of the image it builds.
type dockerImage struct {
	builder, final stage
	// workdir is the builder's WORKDIR, where the repository is copied.
	workdir string
	// copies maps each file the final stage copies from the builder, by
	// its path in the image, to its path in the repository.
	copies     map[string]string
	user       string
	entrypoint []string
}

// readDockerfile parses the Dockerfile's two stages and the final
// stage's COPY, USER and ENTRYPOINT, failing t on what it cannot read.
func readDockerfile(t *testing.T, root string) dockerImage {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(src))
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2 (builder, final)", len(stages))
	}
	d := dockerImage{builder: stages[0], final: stages[1], workdir: "/", copies: map[string]string{}}
	for _, in := range d.builder.ins {
		if in.cmd == "WORKDIR" {
			d.workdir = path.Join(d.workdir, in.args)
		}
	}
	for _, in := range d.final.ins {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) != 3 || f[0] != "--from="+d.builder.name {
				t.Errorf("Dockerfile:%d: COPY %s: want COPY --from=%s SRC DST", in.line, in.args, d.builder.name)
				continue
			}
			from := f[1]
			if !path.IsAbs(from) {
				from = path.Join(d.workdir, from)
			}
			rel, ok := strings.CutPrefix(from, strings.TrimSuffix(d.workdir, "/")+"/")
			if !ok {
				t.Errorf("Dockerfile:%d: COPY from %s, outside the builder's WORKDIR %s", in.line, from, d.workdir)
				continue
			}
			d.copies[f[2]] = rel
		case "USER":
			d.user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &d.entrypoint); err != nil || len(d.entrypoint) == 0 {
				t.Errorf("Dockerfile:%d: ENTRYPOINT %s: want the exec (JSON) form", in.line, in.args)
			}
		case "RUN":
			t.Errorf("Dockerfile:%d: RUN in the final stage (distroless has no shell)", in.line)
		}
	}
	if len(d.copies) == 0 {
		t.Fatal("the final stage copies nothing from the builder")
	}
	return d
}

// TestDockerfile checks the Dockerfile statically, then runs its build
// step (make build-release) and checks every binary the final stage
// copies from the builder.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	d := readDockerfile(t, root)
	builder, final := d.builder, d.final

	// The builder: golang at go.mod's Go version, building with exactly
	// `make build-release`.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := goDirective(t, string(gomod))
	goMinor := strings.Join(strings.SplitN(goVersion, ".", 3)[:2], ".")
	if builder.image != "golang:"+goMinor {
		t.Errorf("builder image %q, want golang:%s (go.mod's go %s)", builder.image, goMinor, goVersion)
	}
	var runs []string
	// The build arguments declared before `make build-release`, which
	// sees them as environment variables.
	args := map[string]bool{}
	for _, in := range builder.ins {
		switch in.cmd {
		case "ARG":
			if !slices.Contains(runs, "make build-release") {
				args[in.args] = true
			}
		case "RUN":
			runs = append(runs, in.args)
		}
	}
	// The context has no .git (.dockerignore): only build arguments can
	// tell make the version and revision to stamp.
	for _, a := range versionArgs {
		if !args[a] {
			t.Errorf("the builder declares no ARG %s before make build-release: docker build --build-arg %s=... would not reach the binaries", a, a)
		}
	}
	buildRuns := 0
	for _, r := range runs {
		switch {
		case r == "make build-release":
			buildRuns++
		case r == "go mod download":
		default:
			t.Errorf("builder RUN %q: the build step must be `make build-release` alone, so CI builds what ships", r)
		}
	}
	if buildRuns != 1 {
		t.Errorf("the builder runs `make build-release` %d times, want once", buildRuns)
	}

	// The final stage: distroless static, non-root, binaries from the
	// builder, the sidecar as entrypoint.
	if final.image != "gcr.io/distroless/static:nonroot" {
		t.Errorf("final image %q, want gcr.io/distroless/static:nonroot", final.image)
	}
	if d.user != "65532:65532" {
		t.Errorf("final USER %q, want 65532:65532 (the chart's and the injected sidecar's uid)", d.user)
	}
	if len(d.entrypoint) == 0 || d.entrypoint[0] != "/tiercache-sidecar" || d.copies[d.entrypoint[0]] == "" {
		t.Errorf("ENTRYPOINT %q, want /tiercache-sidecar, copied from the builder: the operator injects the image with args only", d.entrypoint)
	}
	// The chart runs the operator from the same image.
	deploy, err := os.ReadFile(filepath.Join(root, "charts", "tiercache", "templates", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(deploy, []byte(`command: ["/tiercache-operator"]`)) || d.copies["/tiercache-operator"] == "" {
		t.Errorf("the chart runs /tiercache-operator; the image must contain it (copied: %v)", d.copies)
	}

	if testing.Short() {
		t.Skip("-short: not running make build-release")
	}
	makeIn(t, root, "build-release")
	for _, rel := range d.copies {
		p := filepath.Join(root, filepath.FromSlash(rel))
		checkStaticBinary(t, p)
		checkVersion(t, p, "9.8.7-release-test", testRevision)
	}
}

// makeIn runs make with args in the repository, failing t when it fails.
func makeIn(t *testing.T, root string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	// As docker build --build-arg VERSION=v9.8.7-release-test passes them
	// (the tag's leading v is dropped).
	cmd.Env = append(os.Environ(), "VERSION=v9.8.7-release-test", "REVISION="+testRevision)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make %s: %v (%v)\n%s", strings.Join(args, " "), err, ctx.Err(), out)
	}
}

// versionArgs are the build arguments make build-release stamps into the
// binaries.
var versionArgs = []string{"VERSION", "REVISION"}

const testRevision = "0123456789abcdef0123456789abcdef01234567"

// checkVersion: the binary's --version reports the version and revision
// make stamped.
func checkVersion(t *testing.T, p, version, revision string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("%s --version: %v", p, err)
		return
	}
	want := filepath.Base(p) + " " + version + " (revision " + revision + ", go"
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("%s --version printed %q, want it to start with %q", p, out, want)
	}
}

// checkStaticBinary: an executable ELF with no program interpreter and no
// shared libraries (it runs on distroless/static, which has no libc),
// built with CGO off, -trimpath and stripped.
func checkStaticBinary(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Errorf("%s, which the image must hold, was not built: %v", p, err)
		return
	}
	if fi.Mode()&0o111 == 0 {
		t.Errorf("%s is not executable (%v)", p, fi.Mode())
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Errorf("%s: not an ELF executable: %v", p, err)
		return
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF type %v, want EXEC (a static, non-PIE executable)", p, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: has a PT_INTERP program header: dynamically linked", p)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("%s: needs shared libraries %v", p, libs)
	}
	checkStripped(t, p, f)
	bi, err := buildinfo.ReadFile(p)
	if err != nil {
		t.Errorf("%s: no Go build info: %v", p, err)
		return
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" {
		t.Errorf("%s: built with CGO_ENABLED=%q, want 0", p, settings["CGO_ENABLED"])
	}
	if settings["-trimpath"] != "true" {
		t.Errorf("%s: not built with -trimpath", p)
	}
}

// checkStripped: -ldflags "-s -w" leave no symbol table and no DWARF. (Build
// info cannot tell: with -trimpath the go command does not record
// -ldflags.)
func checkStripped(t *testing.T, p string, f *elf.File) {
	t.Helper()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("%s: has section %s: not built with -ldflags \"-s -w\"", p, s.Name)
		}
	}
}
