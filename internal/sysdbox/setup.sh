# Run by Boot as PID 1 of the box's new PID, mount, network, UTS, IPC and
# cgroup namespaces (unshare --propagation private: no mount made here
# reaches the machine). It builds the box's root, pivots into it and execs
# systemd. $1 is the systemd binary, $2 the unit to boot.
set -eu
sd=$1 unit=$2

# Staging: a tmpfs over /tmp of this mount namespace (the machine's /tmp is
# hidden here, not touched).
mount -t tmpfs -o mode=0700 zerodrop-sysdbox /tmp
mkdir /tmp/upper /tmp/work /tmp/root
r=/tmp/root
# The root: the machine's / read-only below, every write in the tmpfs above.
mount -t overlay zerodrop-sysdbox -o lowerdir=/,upperdir=/tmp/upper,workdir=/tmp/work $r

# /proc of the new PID namespace. /proc/sys read-only (systemd-sysctl would
# set the machine's kernel.* and vm.*), except /proc/sys/net, which is the
# box's network namespace.
mount -t proc -o nosuid,nodev,noexec proc $r/proc
mount --bind $r/proc/sys $r/proc/sys
mount --bind $r/proc/sys/net $r/proc/sys/net
mount -o remount,bind,ro $r/proc/sys
if [ -e $r/proc/sysrq-trigger ]; then
	mount --bind $r/proc/sysrq-trigger $r/proc/sysrq-trigger
	mount -o remount,bind,ro $r/proc/sysrq-trigger
fi

# /sys read-only (the box's network namespace's view), with a cgroup2
# hierarchy whose root is the box's own cgroup (cgroup namespace).
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs $r/sys
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 $r/sys/fs/cgroup

# A minimal /dev: a few device nodes of the machine, a new devpts instance,
# a private /dev/shm and the box's POSIX message queues.
mount -t tmpfs -o mode=0755,nosuid zerodrop-sysdbox $r/dev
for d in null zero full random urandom tty; do
	touch $r/dev/$d
	mount --bind /dev/$d $r/dev/$d
done
mkdir $r/dev/pts $r/dev/shm $r/dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts $r/dev/pts
ln -s pts/ptmx $r/dev/ptmx
mount -t tmpfs -o mode=1777,nosuid,nodev zerodrop-sysdbox $r/dev/shm
mount -t mqueue mqueue $r/dev/mqueue

# What systemd-tmpfiles empties at boot: fresh tmpfs, never the machine's.
mount -t tmpfs -o mode=1777,nosuid,nodev zerodrop-sysdbox $r/tmp
mount -t tmpfs -o mode=1777,nosuid,nodev zerodrop-sysdbox $r/var/tmp
mount -t tmpfs -o mode=0755,nosuid,nodev zerodrop-sysdbox $r/run

mkdir $r/.oldroot
cd $r
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot

# No kernel modules, clock or raw I/O for the box: those would reach the machine.
exec env -i container=zerodrop-test \
	setpriv --bounding-set -sys_module,-sys_time,-sys_rawio,-syslog,-wake_alarm,-mac_admin,-mac_override \
	"$sd" --unit="$unit"
