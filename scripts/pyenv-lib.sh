# Sourced by scripts/build-wheels.sh and scripts/test-python.sh: finding the CPythons that
# pyenv installed. Needs PYENV_ROOT set.

note() { printf '== %s\n' "$*" >&2; }

# The newest installed CPython x.y under pyenv (GIL build), or nothing.
find_python() {
    local minor="$1" best=""
    for d in "$PYENV_ROOT"/versions/"$minor".*; do
        [[ -x "$d/bin/python" ]] || continue
        [[ "$(basename "$d")" =~ ^"$minor"\.[0-9]+$ ]] || continue
        best="$d"
    done
    [[ -n "$best" ]] && printf '%s\n' "$best/bin/python"
}
