"""The Gradescope bundle's `setup.sh`: a Python 3.11 or later, bubblewrap, uv and the locked dependencies.

Gradescope runs it once, as root, while building the image, with network. Its base images differ in their
Python (Ubuntu 22.04: 3.10), and a pip that is not the distribution's may be refused (PEP 668: Debian 12,
Ubuntu 23.04+), so it finds each thing where it can, in this order:

- Python: the first of python3, python3.13 ... python3.11 on PATH that is 3.11 or later; else the
  distribution's `python3.11` package (Ubuntu 22.04 has it in universe); else a Python uv downloads (uv's
  own builds, from GitHub: only where the build has that network); else it stops, saying what it found.
- uv: on PATH; else `python3 -m pip install uv`; where pip is refused or missing, a venv of its own
  (/opt/cs-basics-uv; python3-venv from apt where the venv module is missing).

`uv sync` is then told the Python chosen (`--python`), so the project's `python-preference = "only-system"`
never makes it look for another. staff_tests/test_handout_and_bundle.py runs this script with fake
python3, apt-get and uv on PATH, for each branch.
"""

SETUP = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source, while building the image: a Python 3.11 or
# later, bubblewrap, uv, then the locked dependencies (compiled once). Each step says what it found.
set -euo pipefail
cd "$(dirname "$0")"
# where uv goes when pip may not install it (a test moves them)
UV_HOME="${CS_BASICS_UV_HOME:-/opt/cs-basics-uv}"
BIN="${CS_BASICS_BIN:-/usr/local/bin}"

apt_install() {  # Debian's and Ubuntu's packages (Gradescope's images); fails where apt-get cannot
    command -v apt-get >/dev/null 2>&1 || return 1
    if [ -z "${apt_updated:-}" ]; then apt-get update -qq && apt_updated=1 || return 1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }

python_on_path() {  # the first Python 3.11 or later on PATH
    local name found
    for name in python3 python3.14 python3.13 python3.12 python3.11; do
        if found=$(command -v "$name" 2>/dev/null) && new_enough "$found"; then
            echo "$found"
            return 0
        fi
    done
    return 1
}

install_uv() {
    command -v uv >/dev/null 2>&1 && return 0
    # pip may be refused (PEP 668: a Python the distribution manages) or missing: then a venv of uv's own
    python3 -m pip install --quiet uv >/dev/null 2>&1 && command -v uv >/dev/null 2>&1 && return 0
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || apt_install python3-venv
    python3 -m venv "$UV_HOME"
    "$UV_HOME/bin/python" -m pip install --quiet uv
    ln -sf "$UV_HOME/bin/uv" "$BIN/uv"
    export PATH="$BIN:$PATH"
}

# the sandbox the grader runs submissions in (it falls back to its own where bubblewrap cannot run)
command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap || true
install_uv
export UV_PYTHON_DOWNLOADS=never
if ! PYTHON=$(python_on_path); then
    echo "setup.sh: python3 is $(python3 -V 2>&1 || echo missing); cs-basics needs 3.11 or later: trying apt"
    apt_install python3.11 python3.11-venv || true
    if ! PYTHON=$(python_on_path); then
        echo "setup.sh: no python3.11 package here; asking uv to download a Python 3.11 (needs GitHub)"
        if UV_PYTHON_DOWNLOADS=manual UV_PYTHON_PREFERENCE=only-managed uv python install 3.11 &&
            PYTHON=$(UV_PYTHON_PREFERENCE=only-managed uv python find 3.11); then
            :
        else
            echo "setup.sh: no Python 3.11 or later: python3 is $(python3 -V 2>&1 || echo missing), apt has no" \
                "python3.11 package and uv could not download one. Build on an image whose python3 is 3.11 or" \
                "later, or one where apt has python3.11 (Ubuntu 22.04: universe), or let the build reach GitHub." >&2
            exit 1
        fi
    fi
fi
echo "setup.sh: grading with $PYTHON ($("$PYTHON" -V 2>&1))"
uv sync --frozen --no-dev --compile-bytecode --python "$PYTHON"
"""
