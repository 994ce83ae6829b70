# Sourced by demo.sh and test.sh: make a virtualenv and install the project into it.
# usage: [BOOTSTRAP_GROUPS=test] bootstrap <venv dir> <python> <extra pip requirement...>
# BOOTSTRAP_GROUPS names the dependency groups of pyproject.toml to install with the project,
# separated by commas (default: test; scripts/test.sh asks for dev: test, lint and docs).
# Groups need pip >= 25.1 (`pip install --group`), which the upgrade below brings.
bootstrap() {
    local venv="$1" python="$2" groups="${BOOTSTRAP_GROUPS:-test}" group
    shift 2
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    local stamp="$venv/.installed" want
    want="$(cat pyproject.toml; echo "$groups $*")"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
        local args=(-e .)
        for group in ${groups//,/ }; do
            args+=(--group "$group")
        done
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${args[@]}" "$@"
        printf '%s' "$want" >"$stamp"
    fi
}

# The first Python >= the given minor version (3.X) found on PATH or under pyenv.
find_python() {
    local minor="$1" candidate
    for candidate in python3 python3.11 python3.12 python3.13 python3.14 \
        "$HOME"/.pyenv/versions/3.1[1-9]*/bin/python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c "import sys; sys.exit(sys.version_info < (3, $minor))" 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}
