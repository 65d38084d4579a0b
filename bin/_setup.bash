# shellcheck shell=bash
# Shared setup for bin/demo and bin/test: sourced, never run. Everything here is idempotent and
# quiet when there is nothing to do, so both commands can run it on every start.
#
#   setup::python_venv <requirements file>   picks Python >= 3.11, creates .venv, installs pins
#   setup::need_redis_server                  redis-server >= 6.2 on PATH (apt-get when root)
#   setup::apt_install <command> <package>    installs a Debian package when root and missing
#   setup::free_port                          prints a free TCP port on 127.0.0.1
#
# It never starts, flushes or stops a Redis: that is the caller's business, and only for a
# server the caller started itself.

ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="$ROOT_DIR/.venv"
VENV_PYTHON="$VENV_DIR/bin/python"
MIN_PYTHON_MINOR=11   # Python 3.11+; Django 6.1 needs 3.12, requirements.txt falls back to 5.2 on 3.11
MIN_REDIS_VERSION="6.2"
_APT_UPDATED=0

setup::say() { printf '==> %s\n' "$*" >&2; }
setup::die() { printf 'error: %s\n' "$*" >&2; exit 1; }
setup::is_root() { [[ "$(id -u)" == 0 ]]; }

# Prints "<minor> <path>" when $1 runs, is CPython 3.x >= 3.11 and can create a virtualenv.
setup::_probe_python() {
    local candidate="$1"
    "$candidate" - "$MIN_PYTHON_MINOR" 2>/dev/null <<'PY' || true
import sys
minimum = int(sys.argv[1])
if sys.version_info[0] == 3 and sys.version_info[1] >= minimum:
    import ensurepip, venv  # noqa: F401  (Debian splits these into python3-venv)
    print(sys.version_info[1], sys.executable)
PY
}

# The newest usable Python: python3.N on PATH (pyenv shims that are not active fail the probe
# and are skipped), pyenv's installed versions, then plain python3.
setup::find_python() {
    local candidate best_minor=-1 best_path="" minor path
    local candidates=(python3.14 python3.13 python3.12 python3.11)
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
    for candidate in "$pyenv_root"/versions/3.*/bin/python3 /root/.pyenv/versions/3.*/bin/python3; do
        [[ -x "$candidate" ]] && candidates+=("$candidate")
    done
    candidates+=(python3)
    for candidate in "${candidates[@]}"; do
        command -v "$candidate" >/dev/null 2>&1 || [[ -x "$candidate" ]] || continue
        read -r minor path < <(setup::_probe_python "$candidate") || continue
        if [[ -n "${minor:-}" ]] && (( minor > best_minor )); then
            best_minor="$minor"
            best_path="$path"
        fi
    done
    [[ -n "$best_path" ]] && printf '%s\n' "$best_path"
}

# Creates .venv when missing or broken and installs $1 (a requirements file) when its pins
# changed since the last install (hash stamp in .venv).
setup::python_venv() {
    local requirements="$ROOT_DIR/$1" python stamp_file wanted
    if [[ -x "$VENV_PYTHON" ]] && [[ -n "$(setup::_probe_python "$VENV_PYTHON")" ]]; then
        :
    else
        python="$(setup::find_python || true)"
        if [[ -z "$python" ]] && setup::is_root && command -v apt-get >/dev/null; then
            setup::apt_install "" python3-venv
            python="$(setup::find_python || true)"
        fi
        [[ -n "$python" ]] || setup::die "no Python >= 3.$MIN_PYTHON_MINOR with venv found; install python3 (>= 3.$MIN_PYTHON_MINOR) and python3-venv"
        setup::say "creating .venv with $python ($("$python" --version 2>&1))"
        rm -rf "$VENV_DIR"
        "$python" -m venv "$VENV_DIR"
    fi
    # The stamp covers every requirements file (they include each other) and the interpreter.
    wanted="$( { cat "$ROOT_DIR"/requirements*.txt; "$VENV_PYTHON" --version; } 2>&1 | sha256sum | cut -d' ' -f1)"
    stamp_file="$VENV_DIR/.installed-$(basename "$requirements" .txt)"
    if [[ "$(cat "$stamp_file" 2>/dev/null || true)" != "$wanted" ]]; then
        setup::say "installing $(basename "$requirements") into .venv"
        "$VENV_PYTHON" -m pip install --quiet --disable-pip-version-check -r "$requirements"
        printf '%s\n' "$wanted" >"$stamp_file"
    fi
}

# apt-get install $2 when command $1 is missing ("" = always check the package). Root only;
# returns 1 without root so callers decide whether that is fatal.
setup::apt_install() {
    local command_name="$1" package="$2"
    if [[ -n "$command_name" ]] && command -v "$command_name" >/dev/null 2>&1; then
        return 0
    fi
    if [[ -z "$command_name" ]] && dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
        return 0
    fi
    if ! setup::is_root || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    setup::say "installing Debian package $package"
    if (( _APT_UPDATED == 0 )); then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        _APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
}

# redis-server >= 6.2 on PATH, installed from Debian when root; otherwise a clear message.
setup::need_redis_server() {
    local version
    if ! setup::apt_install redis-server redis-server || ! command -v redis-server >/dev/null 2>&1; then
        cat >&2 <<EOF
error: redis-server is not on PATH, and installing it needs root.
  Install Redis >= $MIN_REDIS_VERSION, then run this again:
    Debian/Ubuntu:  sudo apt-get install redis-server
    macOS:          brew install redis
  or point REDIS_URL at a Redis you run (bin/demo only; bin/test always starts its own).
EOF
        exit 1
    fi
    version="$(redis-server --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')"
    if [[ -z "$version" ]] || [[ "$(printf '%s\n%s\n' "$MIN_REDIS_VERSION" "$version" | sort -V | head -n1)" != "$MIN_REDIS_VERSION" ]]; then
        setup::die "redis-server ${version:-of unknown version} is too old: Redis >= $MIN_REDIS_VERSION is needed"
    fi
}

setup::free_port() {
    "$VENV_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
