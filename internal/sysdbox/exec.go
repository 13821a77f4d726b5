package sysdbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is the environment of every command run in the box.
var env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0",
}

// Command returns a command that runs args in every namespace of the box
// (nsenter -t PID -a), as the box's root, with a small fixed environment
// plus extra. ctx kills nsenter; what it started inside the box ends at the
// latest with the box (Close). The caller starts and waits for it.
func (b *Box) Command(ctx context.Context, extra []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(b.PID), "-a", "--"}, args...)...)
	cmd.Env = append(append([]string{}, env...), extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Exec runs args in the box and returns their combined output; an error names
// the command and carries the output.
func (b *Box) Exec(ctx context.Context, args ...string) ([]byte, error) {
	out, err := b.Command(ctx, nil, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("sysdbox: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Systemctl runs systemctl with args in the box and returns its output.
func (b *Box) Systemctl(ctx context.Context, args ...string) (string, error) {
	out, err := b.Exec(ctx, append([]string{"systemctl", "--no-pager"}, args...)...)
	return strings.TrimSpace(string(out)), err
}

// Show returns one property of unit (systemctl show -p prop --value).
func (b *Box) Show(ctx context.Context, unit, prop string) (string, error) {
	return b.Systemctl(ctx, "show", "-p", prop, "--value", unit)
}

// Journal returns the journal of unit (journalctl -u, messages only).
func (b *Box) Journal(ctx context.Context, unit string) (string, error) {
	out, err := b.Exec(ctx, "journalctl", "--no-pager", "-q", "-o", "cat", "-u", unit)
	return string(out), err
}

// WaitJournal polls unit's journal every 100 ms until it has a line
// containing s, and returns it; it fails when ctx ends or within has passed
// without one. journald stores a message some time after the process wrote
// it (later still on a loaded machine), so a test reads it this way.
func (b *Box) WaitJournal(ctx context.Context, unit, s string, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		j, err := b.Journal(ctx, unit)
		if err == nil && strings.Contains(j, s) {
			return j, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return j, fmt.Errorf("sysdbox: no %q in the journal of %s within %v: %w", s, unit, within, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Path is where the machine sees path of the box (through /proc/PID/root).
func (b *Box) Path(path string) string {
	return fmt.Sprintf("/proc/%d/root%s", b.PID, filepath.Clean("/"+path))
}

// Install writes a unit file (or a drop-in, "name.service.d/x.conf") to
// /etc/systemd/system in the box and runs systemctl daemon-reload.
func (b *Box) Install(ctx context.Context, name, content string) error {
	path := b.Path("/etc/systemd/system/" + name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("sysdbox: install %s: %w", name, err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("sysdbox: install %s: %w", name, err)
	}
	_, err := b.Systemctl(ctx, "daemon-reload")
	return err
}

// CopyIn copies the machine's file src to path in the box (mode 0755),
// creating its directory.
func (b *Box) CopyIn(src, path string) error {
	dst := b.Path(path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("sysdbox: copy %s in: %w", src, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("sysdbox: copy %s in: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("sysdbox: copy %s in: %w", src, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sysdbox: copy %s to %s: %w", src, path, err)
	}
	return nil
}
