#!/usr/bin/env bash
# Runs real programs untraced and under libtracer (every process of each
# command traced, via `bash -c` under LD_PRELOAD) and checks that tracing
# changed nothing the program shows: the same standard output (hashed) and
# exit status; that libtracer printed nothing but its "wrote" lines; and
# that every trace written passes `tracer validate`. Programs missing here
# are skipped. One line per command; exit status 1 if any line is not "ok".
# (Not strace: it kills a child it forks to probe ptrace with SIGKILL, and a
# killed process leaves its trace as a spool, for `tracer recover`.)
#
#   bash scripts/smoke.sh [LIB]     # LIB defaults to target/release/libtracer.so
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
lib=${1:-$here/target/release/libtracer.so}
tracer=$here/target/release/tracer
[ -f "$lib" ] && [ -x "$tracer" ] || { echo "build first: cargo build --release" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
n=0

# check NEEDS COMMAND: NEEDS is the program that must exist.
check() {
    local needs=$1 cmd=$2
    n=$((n + 1))
    if ! command -v "$needs" >/dev/null; then
        printf '%-3s %-22s %s\n' "$n" "skipped (no $needs)" "$cmd"
        return
    fi
    # Each run in a directory of its own (a command may leave files that
    # change its next run); the traces go to the traced runs' directories.
    local d=$work/$n
    mkdir -p "$d/p1" "$d/p2" "$d/t1" "$d/t2"
    local plain traced rp rt
    plain=$(cd "$d/p1" && timeout 300 bash -c "$cmd" 2>/dev/null | md5sum)
    rp=$(cd "$d/p2" && timeout 300 bash -c "$cmd" >/dev/null 2>&1; echo $?)
    traced=$(cd "$d/t1" && LD_PRELOAD=$lib TRACER_OUTPUT=$d/t1/trace timeout 600 bash -c "$cmd" 2>"$d/err" | md5sum)
    rt=$(cd "$d/t2" && LD_PRELOAD=$lib TRACER_OUTPUT=$d/t2/trace timeout 600 bash -c "$cmd" >/dev/null 2>>"$d/err"; echo $?)
    local status=ok
    [ "$plain" = "$traced" ] || status="output differs"
    [ "$rp" = "$rt" ] || status="exit $rp untraced, $rt traced"
    if grep -v -e '^libtracer: wrote ' "$d/err" | grep -q '^libtracer'; then
        status="libtracer said: $(grep -v -e '^libtracer: wrote ' "$d/err" | grep '^libtracer' | head -1)"
    fi
    local traces=0 bad=0 f
    for f in "$d"/t1/*.mlyze "$d"/t2/*.mlyze; do
        [ -e "$f" ] || continue
        traces=$((traces + 1))
        "$tracer" validate "$f" >/dev/null 2>&1 || bad=$((bad + 1))
    done
    [ "$traces" -gt 0 ] || status="no trace written"
    [ "$bad" = 0 ] || status="$bad of $traces traces invalid"
    [ "$status" = ok ] || failed=1
    printf '%-3s %-22s %s\n' "$n" "$status ($traces)" "$cmd"
}

check python3 "python3 -c 'import threading, json; r = []; ts = [threading.Thread(target=lambda: r.append(len(json.dumps(list(range(100000)))))) for _ in range(8)]; [t.start() for t in ts]; [t.join() for t in ts]; print(sum(r))'"
check perl "perl -MStorable -e 'my %h = map { \$_ => [\$_] } 1..100000; print length(Storable::freeze(\\%h)) > 0, \"\\n\"'"
check node "node -e 'let a = []; for (let i = 0; i < 200000; i++) a.push({x: i, s: \"v\" + i}); console.log(a.length)'"
check node "node $here/examples/runtimes/workers.js"
check java "java $here/examples/runtimes/Fill.java 300000"
check sqlite3 "sqlite3 :memory: 'create table t(a, b); with recursive c(x) as (select 1 union all select x + 1 from c limit 100000) insert into t select x, hex(zeroblob(20)) from c; select count(*), sum(length(b)) from t;'"
check sort "seq 1 300000 | sort -R --random-source=/usr/bin/ls | sort -n | tail -1"
check xz "tar cf - /usr/include 2>/dev/null | xz -1 -T2 | xz -d | wc -c"
check zstd "tar cf - /usr/share/perl 2>/dev/null | zstd -3 -T2 | zstd -d | wc -c"
check ssh-keygen "ssh-keygen -t ed25519 -N '' -f key -q && echo made"
check jq "jq -n '[range(100000)] | map(tostring) | length'"
check bc "echo 'scale=2000; 4*a(1)' | bc -l | tail -1"
check tclsh "tclsh <<<'set l {}; for {set i 0} {\$i < 100000} {incr i} {lappend l \$i}; puts [llength \$l]'"
check gdb "gdb -batch -ex 'print 1 + 2'"
check file "file /usr/bin/* | wc -l"
check git "git -C $here log --oneline | wc -l"
check g++ "printf '#include <map>\\n#include <string>\\nint main(){std::map<int,std::string> m; for(int i=0;i<1000;i++) m[i]=std::to_string(i); return m.size()==1000?0:1;}\\n' > m.cpp && g++ -O1 m.cpp -o m && ./m && echo built"
check python3 "python3 -c 'import multiprocessing as m; print(sum(m.Pool(4).map(abs, range(10000))))'"
check perl "perl -e 'for (1..20) { if (!fork) { my @a = (1..10000); exit 0 } } 1 while wait != -1; print \"ok\\n\"'"
check make "for i in 1 2 3 4 5 6; do echo \"int f\$i(void) { return \$i; }\" > f\$i.c; done && printf 'all: f1.o f2.o f3.o f4.o f5.o f6.o\\n%%.o: %%.c\\n\\tcc -c \$< -o \$@\\n' > Makefile && make -s -j4 && ls *.o | wc -l"
check xargs "seq 200 | xargs -P4 -n10 echo | wc -l"
check awk "awk 'BEGIN { for (i = 0; i < 200000; i++) a[i] = i \"x\"; print length(a) }'"
check openssl "openssl genrsa 2048 2>/dev/null | openssl rsa -noout -check 2>/dev/null"
exit $failed
