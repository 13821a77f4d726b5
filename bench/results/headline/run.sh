#!/usr/bin/env bash
# Runs the restart benchmark behind BENCHMARKS.md's headline tables: every
# contender that has the mode, 1 x 100 restarts at c=64 and 256 (the sparse
# pool: 256 clients; h2load: RESTARTS_H2LOAD restarts, one h2load run each),
# one mode after the other, each bounded by MODE_TIMEOUT. Run as root from
# bench/: bash results/headline/run.sh OUT. Then copy each OUT/MODE's
# results.md and results.json into results/headline/MODE/, and regenerate the
# tables with (a mode stopped by MODE_TIMEOUT is summarized from the runs it
# finished, and its header says so): go run ./cmd/contenders -headline results/headline -into ../BENCHMARKS.md
set -euo pipefail
out=${1:?usage: run.sh OUT [MODE...]}
shift
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(new-conn tls-new-conn keepalive tls-keepalive pool h2load)
restarts=${RESTARTS:-100}
h2restarts=${RESTARTS_H2LOAD:-50}
timeout=${MODE_TIMEOUT:-25m}
bin=$out/bin
mkdir -p "$bin"
CGO_ENABLED=0 go build -o "$bin/" ./cmd/contenders ./cmd/zdworker ./cmd/zdworker-steer ./cmd/zdworker-tableflip
peers=zd-handoff,zd-drain,tableflip,naive,nginx,haproxy,caddy
for mode in "${modes[@]}"; do
	case $mode in
	new-conn) flags=(-c 64,256) ;;
	keepalive) flags=(-keepalive -c 64,256) ;;
	pool) flags=(-pool 256) ;;
	tls-new-conn) flags=(-tls -c 64,256) ;;
	tls-keepalive) flags=(-tls -keepalive -c 64,256) ;;
	h2load) flags=(-h2load -c 64,256) ;;
	*) echo "unknown mode $mode" >&2; exit 2 ;;
	esac
	n=$restarts
	[ "$mode" = h2load ] && n=$h2restarts
	echo "$mode: start $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	mkdir -p "$out/$mode"
	cut -d' ' -f1-3 /proc/loadavg > "$out/$mode/loadavg-start"
	cut -d' ' -f1-3 /proc/loadavg > "$out/$mode/loadavg-end" # overwritten when the run ends
	st=0
	timeout --foreground -k 30s "$timeout" "$bin/contenders" "${flags[@]}" -only "$peers" -restarts "$n" -reps 1 -o "$out/$mode" || st=$?
	cut -d' ' -f1-3 /proc/loadavg > "$out/$mode/loadavg-end"
	echo "$mode: end $(date -u +%FT%TZ), exit $st, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	# Out of time: no summary was written; make it from the runs that ended.
	[ -f "$out/$mode/results.json" ] || "$bin/contenders" -resummarize "$out/$mode" || true
done
