package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// nobody is the uid that plays the other user who planted the directory.
const nobody = 65534

// The first generation writes its key only into a directory that is ours
// alone, and never through a link: each planted directory or name is
// refused with errUnsafe before anything is written, and the file the
// planted symlink points to (root's, mode 0644, as in the report) keeps its
// contents.
func TestPlantedKeyRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			plant func(t *testing.T, dir, target string)
		}{
			{"another user's directory", func(t *testing.T, dir, target string) {
				mustDo(t, os.Mkdir(dir, 0o755), os.Symlink(target, filepath.Join(dir, "key.pem")), os.Chown(dir, nobody, nobody))
			}},
			{"our directory, writable by others", func(t *testing.T, dir, target string) {
				mustDo(t, os.Mkdir(dir, 0o700), os.Chmod(dir, 0o777), os.Symlink(target, filepath.Join(dir, "key.pem")))
			}},
			{"our directory 0700 holding a symlink", func(t *testing.T, dir, target string) {
				mustDo(t, os.Mkdir(dir, 0o700), os.Symlink(target, filepath.Join(dir, "key.pem")))
			}},
			{"our directory 0700 holding a symlink as cert.pem", func(t *testing.T, dir, target string) {
				mustDo(t, os.Mkdir(dir, 0o700), os.Symlink(target, filepath.Join(dir, "cert.pem")))
			}},
			{"the directory is a symlink", func(t *testing.T, dir, target string) {
				other := filepath.Join(filepath.Dir(dir), "elsewhere")
				mustDo(t, os.Mkdir(other, 0o700), os.Symlink(target, filepath.Join(other, "key.pem")), os.Symlink(other, dir))
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tmp := t.TempDir()
				target := filepath.Join(tmp, "target")
				const original = "root's file, world-readable\n"
				mustDo(t, os.WriteFile(target, []byte(original), 0o644))
				dir := filepath.Join(tmp, "zerodrop-https-0")
				tc.plant(t, dir, target)
				c, err := parseFlags([]string{"-addr", "127.0.0.1:0", "-socket", filepath.Join(dir, "handoff.sock")}, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // should the example get as far as serving, it stops at once
				err = run(ctx, c, io.Discard)
				if !errors.Is(err, errUnsafe) {
					t.Errorf("run = %v, want an error wrapping %q", err, errUnsafe)
				} else {
					t.Logf("run = %v", err)
				}
				if got, err := os.ReadFile(target); err != nil || string(got) != original {
					t.Errorf("the symlink's target now holds %q (%v), want it untouched: %q", got, err, original)
				}
			})
		}
	})
}

// A directory of ours from an earlier run (0700, with its cert.pem and
// key.pem) is used again: both files are replaced by new ones, the key 0600.
func TestSelfSignedAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := selfSigned(dir); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := selfSigned(dir); err != nil {
		t.Fatalf("second run in the same directory: %v", err)
	}
	second, err := os.ReadFile(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, second) {
		t.Errorf("key.pem was not replaced")
	}
	for name, want := range map[string]os.FileMode{"key.pem": 0o600, "cert.pem": 0o644, ".": 0o700 | os.ModeDir} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
}

// mustDo fails t on the first error of errs.
func mustDo(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
