#!/usr/bin/env bash
# Refreshes (or, with --check, verifies) ui/vendor/: the bpmn-js viewer bundle
# and its stylesheets, the only third-party files the console embeds.
#
#   ui/vendor.sh          # npm ci from ui/package-lock.json, copy the files in
#   ui/vendor.sh --check  # npm ci, then fail if ui/vendor/ differs from the package
#
# Invariants:
# - the files come from the exact package versions in ui/package-lock.json
#   (`npm ci` checks each tarball against the lockfile's integrity hash);
# - ui/vendor/SHA256SUMS lists every vendored file; `sha256sum -c` over it
#   (which .ci/run does, offline) proves the committed files are the ones
#   this script copied.
# Nothing here runs during `cargo build`: the vendored files are committed,
# so building and testing need neither npm nor the network.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
work="$root/target/ui-vendor"
FILES=(
    "dist/bpmn-navigated-viewer.production.min.js:bpmn-navigated-viewer.production.min.js"
    "dist/assets/diagram-js.css:diagram-js.css"
    "dist/assets/bpmn-js.css:bpmn-js.css"
    "LICENSE:LICENSE.bpmn-js"
)

command -v npm >/dev/null 2>&1 || { echo "vendor.sh: npm not found" >&2; exit 1; }
mkdir -p "$work"
cp -f "$here/package.json" "$here/package-lock.json" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

status=0
for pair in "${FILES[@]}"; do
    from="$work/node_modules/bpmn-js/${pair%%:*}"
    to="$here/vendor/${pair##*:}"
    if [[ "${1:-}" == "--check" ]]; then
        cmp -s "$from" "$to" || { echo "vendor.sh: ui/vendor/${pair##*:} differs from the package" >&2; status=1; }
    else
        cp -f "$from" "$to"
    fi
done
if [[ "${1:-}" != "--check" ]]; then
    (cd "$here/vendor" && sha256sum -- $(for p in "${FILES[@]}"; do echo "${p##*:}"; done) > SHA256SUMS)
    echo "ui/vendor refreshed from $(cd "$work" && node -p 'require("./node_modules/bpmn-js/package.json").version')"
fi
exit $status
