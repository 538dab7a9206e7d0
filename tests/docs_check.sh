#!/usr/bin/env bash
# docs_check.sh — the manual cannot rot: runs every block README.md and docs/*.md mark as
# runnable, resolves every relative link (and its #anchor) of README.md, docs/*.md and
# perf/RESULTS.md, and compares docs/config.md's key tables with `mha schema`.
#
# The marks (docs/README.md, "Runnable blocks"), a fenced block's info string:
#   ```c run          compiled as written against a staged install (pkg-config mha), run: exit 0
#   ```sh run         run by bash -e -o pipefail in the page's scratch folder: exit 0
#   ```sh run exit=N  the same, exit N
#   ```yaml file=NAME written to NAME in the page's scratch folder, for the blocks after it
# The scratch folder of a page is BUILD/docs-check/PAGE/, where build/ is BUILD (the build
# under test: build/debug under DEBUG=1) and configs/, tests/, perf/ are the repository's.
#
# usage: tests/docs_check.sh BUILD [PART...]   PART: links c sh schema (default: all four)
# env:   DOCS_STAGE   a staged install's root (make install DESTDIR=… PREFIX=/usr/local); c only
#        DOCS_CC, DOCS_CFLAGS   compiler and flags for the C blocks (cc; -std=c11 -Wall -Werror -O2)
# Needs bash, coreutils, awk, diff and pkg-config: what a Debian machine has after `make deps`.
set -u
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
[ $# -ge 1 ] || { echo "usage: $0 BUILD [links|c|sh|schema]..." >&2; exit 2; }
build=$1
shift
case $build in /*) ;; *) build=$root/$build ;; esac
parts=" ${*:-links c sh schema} "
want() { case $parts in *" $1 "*) return 0 ;; esac; return 1; }

work=$build/docs-check
rm -rf "$work" && mkdir -p "$work" || exit 2
pages=(README.md docs/*.md)
link_pages=(README.md docs/*.md perf/RESULTS.md)
fails=0
fail() { echo "docs check: FAIL: $*" >&2; fails=$((fails + 1)); }

# ---- links: [text](target) outside code, relative targets only; #anchors against the
# target's headings (GitHub's slugs: lower case, spaces to '-', other punctuation dropped,
# -1, -2 … for repeats; bytes outside ASCII dropped) and its <a id|name="…"> tags.
anchors_of() { # file -> one anchor a line
    awk '
    /^```/ { fence = !fence; next }
    fence { next }
    /^#+[ \t]/ {
        t = $0; sub(/^#+[ \t]+/, "", t); sub(/[ \t]+#+[ \t]*$/, "", t); t = tolower(t); g = ""
        for (i = 1; i <= length(t); i++) {
            c = substr(t, i, 1)
            if (c ~ /[a-z0-9_-]/) g = g c; else if (c == " ") g = g "-"
        }
        if (g in seen) { seen[g]++; print g "-" seen[g] } else { seen[g] = 0; print g }
    }
    {
        line = $0
        while (match(line, /<a (id|name)="[^"]*"/)) {
            a = substr(line, RSTART, RLENGTH); sub(/^<a (id|name)="/, "", a); sub(/"$/, "", a); print a
            line = substr(line, RSTART + RLENGTH)
        }
    }' "$1"
}
links_of() { # page -> "LINE TARGET" a line
    awk '
    /^```/ { fence = !fence; next }
    fence || /^    / { next }
    {
        line = $0; gsub(/`[^`]*`/, "", line)
        while (match(line, /\]\([^) ]*\)/)) {
            print NR, substr(line, RSTART + 2, RLENGTH - 3)
            line = substr(line, RSTART + RLENGTH)
        }
    }' "$1"
}
nlinks=0
if want links; then
    mkdir -p "$work/anchors"
    for page in "${link_pages[@]}"; do
        dir=$(dirname "$page")
        while read -r ln target; do
            case $target in http://* | https://* | mailto:*) continue ;; esac
            nlinks=$((nlinks + 1))
            file=${target%%#*}
            anchor=
            case $target in *'#'*) anchor=${target#*#} ;; esac
            if [ -z "$file" ]; then path=$page; else path=$dir/$file; fi
            if [ ! -e "$path" ]; then fail "$page:$ln: link to $target: no file $path"; continue; fi
            [ -n "$anchor" ] || continue
            case $path in *.md) ;; *) fail "$page:$ln: link to $target: an anchor into a file that is not Markdown"; continue ;; esac
            cache=$work/anchors/$(echo "$path" | tr '/.' '__')
            [ -f "$cache" ] || anchors_of "$path" > "$cache"
            grep -qxF -- "$anchor" "$cache" || fail "$page:$ln: link to $target: no heading or <a id> '#$anchor' in $path"
        done < <(links_of "$page")
    done
fi

# ---- the blocks, page by page in order
stage=${DOCS_STAGE:-}
cc=${DOCS_CC:-cc}
cflags=${DOCS_CFLAGS:--std=c11 -Wall -Werror -O2}
nc=0 nsh=0 nfile=0
if want c || want sh; then
    if want c && { [ -z "$stage" ] || [ ! -f "$stage/usr/local/lib/pkgconfig/mha.pc" ]; }; then
        fail "DOCS_STAGE ($stage) holds no staged install (usr/local/lib/pkgconfig/mha.pc): the C blocks need one"
        stage=
    fi
    for page in "${pages[@]}"; do
        id=$(echo "$page" | tr '/.' '__')
        blocks=$work/$id
        scratch=$blocks/run
        mkdir -p "$scratch"
        for l in build configs tests perf; do
            if [ $l = build ]; then ln -s "$build" "$scratch/$l"; else ln -s "$root/$l" "$scratch/$l"; fi
        done
        # every marked block to blocks/NNN, listed in blocks/manifest as "NNN LANG MARK ARG LINE"
        awk -v dir="$blocks" '
        /^```/ {
            if (!on) {
                on = 1; n++; mark = ""; arg = "-"; k = split(substr($0, 4), w, /[ \t]+/)
                for (i = 2; i <= k; i++) {
                    if (w[i] == "run") mark = "run"
                    else if (w[i] ~ /^exit=[0-9]+$/) arg = w[i]
                    else if (w[i] ~ /^file=./) { mark = "file"; arg = substr(w[i], 6) }
                }
                f = sprintf("%s/%03d", dir, n)
                if (mark != "") { printf "%03d %s %s %s %d\n", n, w[1], mark, arg, NR > (dir "/manifest"); printf "" > f }
            } else { on = 0; if (mark != "") close(f); mark = "" }
            next
        }
        on && mark != "" { print > f }' "$page"
        [ -f "$blocks/manifest" ] || continue
        while read -r n lang mark arg ln; do
            where="$page:$ln"
            case "$lang $mark" in
            "c run")
                want c || continue
                nc=$((nc + 1))
                [ -n "$stage" ] || { fail "$where: C block not compiled (no staged install)"; continue; }
                cp "$blocks/$n" "$blocks/$n.c"
                if ! PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_PATH=$stage/usr/local/lib/pkgconfig \
                    sh -c "$cc $cflags '$blocks/$n.c' -o '$blocks/$n.bin' \$(pkg-config --cflags --libs mha)" \
                    > "$blocks/$n.out" 2>&1; then
                    fail "$where: C block does not compile:"; tail -30 "$blocks/$n.out" >&2; continue
                fi
                (cd "$scratch" && LD_LIBRARY_PATH=$stage/usr/local/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
                    timeout 120 "$blocks/$n.bin") > "$blocks/$n.out" 2>&1
                rc=$?
                if [ $rc -ne 0 ]; then fail "$where: C block exits $rc:"; tail -30 "$blocks/$n.out" >&2; continue; fi
                echo "docs check: $where: C block: $(head -1 "$blocks/$n.out")"
                ;;
            "sh run")
                want sh || continue
                nsh=$((nsh + 1))
                expect=0
                case $arg in exit=*) expect=${arg#exit=} ;; esac
                (cd "$scratch" && timeout 120 bash -e -o pipefail "$blocks/$n") > "$blocks/$n.out" 2>&1
                rc=$?
                if [ $rc -ne "$expect" ]; then
                    fail "$where: sh block exits $rc, not $expect:"; sed 's/^/    /' "$blocks/$n" >&2; tail -30 "$blocks/$n.out" >&2
                    continue
                fi
                echo "docs check: $where: sh block, exit $rc"
                ;;
            *" file")
                nfile=$((nfile + 1))
                cp "$blocks/$n" "$scratch/$arg"
                ;;
            *) fail "$where: unknown mark '$lang $mark' (docs/README.md lists the marks)" ;;
            esac
        done < "$blocks/manifest"
    done
fi

# ---- docs/config.md's key tables are what `mha schema` prints
if want schema; then
    awk '/^<!-- mha schema: end -->$/ { on = 0 } on { print } /^<!-- mha schema: begin -->$/ { on = 1 }' \
        docs/config.md > "$work/schema.md"
    if ! "$build/mha" schema > "$work/schema.out" 2>&1; then
        fail "$build/mha schema failed:"; cat "$work/schema.out" >&2
    elif ! diff -u "$work/schema.out" "$work/schema.md" > "$work/schema.diff"; then
        fail "docs/config.md's key tables (between its mha schema markers) are not what \`mha schema\` prints (- schema, + docs):"
        head -40 "$work/schema.diff" >&2
    fi
fi

summary="$nlinks links, $nc C blocks, $nsh sh blocks, $nfile files"
if [ $fails -ne 0 ]; then
    echo "docs check: $fails failure(s) ($summary checked)" >&2
    exit 1
fi
echo "docs check: passed ($summary; parts:$parts)"
