#!/bin/sh
# Install Azurite (Microsoft's Azure Storage emulator, from npm) into
# .deps/azurite unless it is there already: the tests' blob storage is the
# real emulator, not a mock.  Node.js and npm come from Debian when missing.
# Prints the path of azurite-blob.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.deps/azurite"
bin="$dir/node_modules/.bin/azurite-blob"
if [ ! -x "$bin" ]; then
    if ! command -v npm >/dev/null 2>&1; then "$root/tools/deps.sh" nodejs npm; fi
    mkdir -p "$dir"
    echo "deps: installing azurite (npm) into .deps/azurite" >&2
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error azurite@3 >/dev/null)
fi
echo "$bin"
