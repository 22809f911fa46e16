#!/usr/bin/env bash
# Installs, from Debian's packages, what `make demo` or `make test` needs beyond Python;
# only what is missing, as root directly, otherwise through sudo when it is there.
#
#   install-system-deps.sh --for demo   python3 with venv, and the PostgreSQL 15 server
#   install-system-deps.sh --for test   (the default) the same, and the test tools:
#                                       pgTAP, plpgsql_check, pg_prove, Chromium and its
#                                       driver (the dashboard's browser tests), Node.js and
#                                       npm (the reference MCP servers of the proxy's tests)
#   ... --print                         only print the missing packages, one a line
#
# A first demo thus installs no test tool: Chromium alone is some hundred megabytes.
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
purpose=test
print_only=0
while (($#)); do
    case $1 in
    --print)
        print_only=1
        shift
        ;;
    --for)
        purpose=${2:-}
        shift 2 || true
        ;;
    --for=*)
        purpose=${1#--for=}
        shift
        ;;
    *)
        echo "usage: $0 [--for demo|test] [--print]" >&2
        exit 2
        ;;
    esac
done
if [[ $purpose != demo && $purpose != test ]]; then
    echo "usage: $0 [--for demo|test]" >&2
    exit 2
fi

missing=()
# A stock Debian 12 image may lack python3 itself; `python3 -m venv` needs ensurepip,
# which Debian ships apart, in python3-venv.
command -v python3 >/dev/null || missing+=("python3")
python3 -c 'import ensurepip' 2>/dev/null || missing+=("python3-venv")

bindir=/usr/lib/postgresql/$PG_MAJOR/bin
if command -v pg_config >/dev/null && [[ -x "$(pg_config --bindir)/initdb" ]]; then
    bindir=$(pg_config --bindir)
fi
[[ -x $bindir/initdb ]] || missing+=("postgresql-$PG_MAJOR")

if [[ $purpose == test ]]; then
    # pg_config, which the test tools use to find the server's extension folder
    command -v pg_config >/dev/null || missing+=("postgresql-server-dev-$PG_MAJOR")
    sharedir=$(pg_config --sharedir 2>/dev/null || echo "/usr/share/postgresql/$PG_MAJOR")
    [[ -f $sharedir/extension/pgtap.control ]] || missing+=("postgresql-$PG_MAJOR-pgtap")
    [[ -f $sharedir/extension/plpgsql_check.control ]] ||
        missing+=("postgresql-$PG_MAJOR-plpgsql-check")
    command -v pg_prove >/dev/null || missing+=("libtap-parser-sourcehandler-pgtap-perl")
    [[ -x /usr/bin/chromium ]] || missing+=("chromium")
    [[ -x /usr/bin/chromedriver ]] || missing+=("chromium-driver")
    # the reference MCP servers the proxy is tested against (make deps installs them by npm)
    command -v node >/dev/null || missing+=("nodejs")
    command -v npm >/dev/null || missing+=("npm")
fi

if ((print_only)); then
    ((${#missing[@]})) && printf '%s\n' "${missing[@]}"
    exit 0
fi
((${#missing[@]})) || exit 0

echo "installing system packages for $purpose: ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "error: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
fi
echo "apt-get update ..." >&2
"${sudo[@]}" apt-get update -qq
echo "apt-get install ${missing[*]} ..." >&2
# apt's own progress lines (one a package), without its full chatter
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}" | { grep --line-buffered -E '^(Get|Setting up)' || true; }
echo "system packages installed" >&2
