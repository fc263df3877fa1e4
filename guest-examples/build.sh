#!/usr/bin/env bash
# Builds the Sutra guest examples into <repo>/target/guests/<name>.wasm.
#
#   guest-examples/build.sh            # every guest
#   guest-examples/build.sh chaos score  # only these
#
# Guests: chaos, score, fetch (Rust, wit-bindgen), py-task and py-fetch
# (componentize-py), js-task and js-fetch (componentize-js). Every output is a component of the world
# `task` in <repo>/wit.
#
# Invariants:
# - Only what changed is rebuilt. Rust guests go through cargo (a no-op when
#   nothing changed); the others are rebuilt only when the content hash of
#   their inputs (sources, WIT, pinned tool versions, build recipe) differs
#   from the stamp next to the output. Outputs are written atomically.
# - On a fresh machine it installs what it needs itself, from crates.io, PyPI
#   and npm only, under <repo>/target/guest-tools: the wasm32-wasip2 Rust
#   target, componentize-py (pinned) in a venv, componentize-js (pinned by
#   js/package-lock.json) with `npm ci`.
# - On success it prints one line per guest and nothing else; on failure it
#   prints the failing step's log to stderr and exits non-zero.
# - Concurrent runs are serialised with a lock, so parallel tests can call it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
wit="$root/wit"
out="$root/target/guests"
tools="$root/target/guest-tools"
logs="$tools/logs"

COMPONENTIZE_PY_VERSION="0.25.1"
ALL_GUESTS=(chaos score fetch py-task py-fetch js-task js-fetch)

mkdir -p "$out" "$logs"

# One build at a time per checkout (parallel test binaries may all call us).
exec 9>"$out/.build.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

# Builds invoked from cargo (tests, build scripts) must not inherit the host
# build's flags or wrappers: they would be applied to the wasm build.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS RUSTC_WORKSPACE_WRAPPER \
    CARGO_TARGET_DIR CARGO_BUILD_TARGET CARGO_BUILD_TARGET_DIR

die() {
    echo "build.sh: $*" >&2
    exit 1
}

# run LOG CMD...: runs CMD with its output in LOG; on failure shows LOG and exits.
run() {
    local log="$1"
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "build.sh: command failed: $*" >&2
        cat "$log" >&2
        exit 1
    fi
}

# inputs_hash RECIPE FILE...: one hash of a recipe string and the files' paths and contents.
inputs_hash() {
    local recipe="$1" f
    shift
    {
        printf '%s\n' "$recipe"
        for f in "$@"; do
            printf '%s\n' "${f#"$root"/}"
            sha256sum <"$f"
        done
    } | sha256sum | cut -d' ' -f1
}

# wit_files: the WIT sources every guest is built against, in a stable order.
wit_files() {
    find "$wit" -type f -name '*.wit' | LC_ALL=C sort
}

# up_to_date NAME HASH: whether target/guests/NAME.wasm was built from HASH.
up_to_date() {
    [[ -f "$out/$1.wasm" && -f "$out/$1.wasm.stamp" && "$(<"$out/$1.wasm.stamp")" == "$2" ]]
}

# publish NAME FILE HASH: installs FILE as target/guests/NAME.wasm, stamped with HASH.
publish() {
    mv -f "$2" "$out/$1.wasm"
    printf '%s\n' "$3" >"$out/$1.wasm.stamp"
}

# ---- Rust guests -------------------------------------------------------------

build_rust() {
    local names=("$@") name src dst log="$logs/cargo.log"
    command -v cargo >/dev/null 2>&1 || die "cargo not found (install Rust with rustup)"
    local sysroot
    sysroot="$(cd "$here" && rustc --print sysroot)"
    if [[ ! -d "$sysroot/lib/rustlib/wasm32-wasip2" ]]; then
        command -v rustup >/dev/null 2>&1 || die "the wasm32-wasip2 target is missing and rustup is not installed"
        run "$logs/rustup.log" bash -c "cd '$here' && rustup target add wasm32-wasip2"
    fi
    local args=(build --release --locked --quiet --target wasm32-wasip2
        --manifest-path "$here/Cargo.toml" --target-dir "$root/target/guest-build")
    # One cargo run per guest, so dependency features never unify across
    # guests: chaos is no_std and needs serde_json without `std`.
    for name in "${names[@]}"; do
        run "$log" cargo "${args[@]}" -p "$name"
    done
    for name in "${names[@]}"; do
        src="$root/target/guest-build/wasm32-wasip2/release/$name.wasm"
        dst="$out/$name.wasm"
        [[ -f "$src" ]] || die "cargo did not produce $src"
        if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
            echo "guest $name: up to date"
        else
            cp -f "$src" "$dst.tmp"
            mv -f "$dst.tmp" "$dst"
            echo "guest $name: built"
        fi
    done
}

# ---- Python guest (componentize-py) ------------------------------------------

ensure_componentize_py() {
    local venv="$tools/py" want="componentize-py==$COMPONENTIZE_PY_VERSION"
    if [[ -x "$venv/bin/componentize-py" && -f "$venv/.sutra-installed" && "$(<"$venv/.sutra-installed")" == "$want" ]]; then
        return
    fi
    local python="${PYTHON:-python3}"
    command -v "$python" >/dev/null 2>&1 || die "$python not found (needed for componentize-py)"
    rm -rf "$venv"
    run "$logs/venv.log" "$python" -m venv "$venv"
    run "$logs/pip.log" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$want"
    printf '%s\n' "$want" >"$venv/.sutra-installed"
}

build_py() {
    local name=py-task dir="$here/py" files hash
    mapfile -t files < <(wit_files; find "$dir" -type f -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort)
    local recipe="componentize-py==$COMPONENTIZE_PY_VERSION -w task componentize app"
    hash="$(inputs_hash "$recipe" "${files[@]}")"
    if up_to_date "$name" "$hash"; then
        echo "guest $name: up to date"
        return
    fi
    ensure_componentize_py
    # Built from a copy: componentize-py leaves __pycache__ next to what it imports.
    local stage="$tools/py-src" tmp="$out/$name.wasm.tmp"
    rm -rf "$stage"
    mkdir -p "$stage"
    cp -R "$dir/." "$stage/"
    rm -rf "$stage/__pycache__"
    run "$logs/$name.log" "$tools/py/bin/componentize-py" \
        -d "$wit" -w task componentize -p "$stage" app -o "$tmp"
    publish "$name" "$tmp" "$hash"
    echo "guest $name: built"
}

# py-fetch: the task world plus wasi:http (py-fetch/wit/world.wit), staged
# with the task world and the WASI packages of fetch/wit/deps as its deps.
build_py_fetch() {
    local name=py-fetch dir="$here/py-fetch" files hash
    mapfile -t files < <(wit_files; find "$dir" "$here/fetch/wit/deps" -type f \( -name '*.py' -o -name '*.wit' \) -not -path '*/__pycache__/*' | LC_ALL=C sort)
    local recipe="componentize-py==$COMPONENTIZE_PY_VERSION -w task-http componentize app"
    hash="$(inputs_hash "$recipe" "${files[@]}")"
    if up_to_date "$name" "$hash"; then
        echo "guest $name: up to date"
        return
    fi
    ensure_componentize_py
    local stage="$tools/py-fetch-src" witdir="$tools/py-fetch-wit" tmp="$out/$name.wasm.tmp"
    rm -rf "$stage" "$witdir"
    mkdir -p "$stage" "$witdir/deps/task"
    cp "$dir/app.py" "$stage/"
    cp "$dir/wit/world.wit" "$witdir/"
    cp "$here/fetch/wit/deps/"*.wit "$witdir/deps/"
    cp "$wit/task.wit" "$witdir/deps/task/"
    run "$logs/$name.log" "$tools/py/bin/componentize-py" \
        -d "$witdir" -w task-http componentize -p "$stage" app -o "$tmp"
    publish "$name" "$tmp" "$hash"
    echo "guest $name: built"
}

# ---- JavaScript guest (componentize-js) --------------------------------------

ensure_componentize_js() {
    local dir="$tools/js" lock_hash
    lock_hash="$(cat "$here/js/package.json" "$here/js/package-lock.json" | sha256sum | cut -d' ' -f1)"
    if [[ -x "$dir/node_modules/.bin/componentize-js" && -f "$dir/.sutra-installed" && "$(<"$dir/.sutra-installed")" == "$lock_hash" ]]; then
        return
    fi
    command -v npm >/dev/null 2>&1 || die "npm not found (needed for componentize-js)"
    mkdir -p "$dir"
    rm -f "$dir/.sutra-installed"
    cp -f "$here/js/package.json" "$here/js/package-lock.json" "$dir/"
    run "$logs/npm.log" bash -c "cd '$dir' && npm ci --no-audit --no-fund --loglevel=error"
    printf '%s\n' "$lock_hash" >"$dir/.sutra-installed"
}

build_js() {
    local name=js-task dir="$here/js" files hash
    mapfile -t files < <(wit_files; printf '%s\n' "$dir/app.js" "$dir/package.json" "$dir/package-lock.json")
    # http and fetch-event are disabled so the component imports no wasi:http.
    local recipe="componentize-js app.js -n task -d http fetch-event"
    hash="$(inputs_hash "$recipe" "${files[@]}")"
    if up_to_date "$name" "$hash"; then
        echo "guest $name: up to date"
        return
    fi
    ensure_componentize_js
    local tmp="$out/$name.wasm.tmp"
    run "$logs/$name.log" "$tools/js/node_modules/.bin/componentize-js" "$dir/app.js" \
        -w "$wit" -n task -d http fetch-event -o "$tmp"
    publish "$name" "$tmp" "$hash"
    echo "guest $name: built"
}

# js-fetch: fetch() over wasi:http (so http stays enabled; only the
# incoming fetch event is disabled: a task exports `run`, not a handler).
build_js_fetch() {
    local name=js-fetch dir="$here/js" files hash
    mapfile -t files < <(wit_files; printf '%s\n' "$dir/fetch.js" "$dir/package.json" "$dir/package-lock.json")
    local recipe="componentize-js fetch.js -n task -d fetch-event"
    hash="$(inputs_hash "$recipe" "${files[@]}")"
    if up_to_date "$name" "$hash"; then
        echo "guest $name: up to date"
        return
    fi
    ensure_componentize_js
    local tmp="$out/$name.wasm.tmp"
    run "$logs/$name.log" "$tools/js/node_modules/.bin/componentize-js" "$dir/fetch.js" \
        -w "$wit" -n task -d fetch-event -o "$tmp"
    publish "$name" "$tmp" "$hash"
    echo "guest $name: built"
}

# ---- main --------------------------------------------------------------------

wanted=("$@")
if [[ ${#wanted[@]} -eq 0 ]]; then
    wanted=("${ALL_GUESTS[@]}")
fi

rust=()
for name in "${wanted[@]}"; do
    case "$name" in
        chaos | score | fetch) rust+=("$name") ;;
        py-task | py-fetch | js-task | js-fetch) ;;
        *) die "unknown guest '$name' (known: ${ALL_GUESTS[*]})" ;;
    esac
done

if [[ ${#rust[@]} -gt 0 ]]; then
    build_rust "${rust[@]}"
fi
for name in "${wanted[@]}"; do
    case "$name" in
        py-task) build_py ;;
        py-fetch) build_py_fetch ;;
        js-task) build_js ;;
        js-fetch) build_js_fetch ;;
    esac
done
