#!/bin/bash
# Runs the tests beside a load that keeps both cores busy (issue 31's condition): stress-ng (2 CPU workers, 1 I/O,
# 1 of 256 MiB memory) and a loop of `go build -a` of the repository into a temporary directory, each started and
# ended by PID. The tests: the README's test command, or with --ci the whole .ci/run (as root, as CI runs it).
# Usage, from the repository's root: bench/hog/run.sh LOG [--ci]
# LOG gets the start, the load average each minute, the tests' output and the end with the exit code.
set -u
log=${1:?usage: bench/hog/run.sh LOG [--ci]}
command -v stress-ng >/dev/null || { echo "stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2; }
if pgrep -f "stress-ng --cpu 2 --io 1" >/dev/null; then echo "a hog run is already running" >&2; exit 1; fi
echo "start $(date -u +%T) head $(git rev-parse --short HEAD) ${2:-} load $(cut -d' ' -f1-3 /proc/loadavg)" > "$log"
stress-ng --cpu 2 --io 1 --vm 1 --vm-bytes 256M --timeout 3600s >/dev/null 2>&1 & hog=$!
( for i in $(seq 1 200); do d=$(mktemp -d); go build -a -o "$d" ./... >/dev/null 2>&1; rm -rf "$d"; done ) & loop=$!
( while sleep 60; do echo "load $(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)" >> "$log"; done ) & mon=$!
if [ "${2:-}" = --ci ]; then
	bash .ci/run >> "$log" 2>&1
else
	ZERODROP_REQUIRE_PRIVILEGED=1 go test -race -count=1 -timeout 30m work >> "$log" 2>&1
fi
rc=$?
kill $hog $mon; pkill -P $loop; kill $loop
echo "end $(date -u +%T) rc=$rc" >> "$log"
exit $rc
