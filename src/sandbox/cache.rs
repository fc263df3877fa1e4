//! The on-disk cache of precompiled components.
//!
//! Invariant: an artifact's file name is the sha256 of the component bytes
//! plus a digest of `Engine::precompile_compatibility_hash()`, so an artifact
//! is only ever loaded into an engine that can run it; files are written to a
//! temporary name and renamed, so a reader never sees a half-written artifact;
//! only artifacts this cache wrote itself (from bytes that compiled and passed
//! the import policy) are ever deserialized.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The sha256 of `bytes`, lowercase hex.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A [`Hasher`] that feeds sha256, so the engine's compatibility hash gives
/// the same text in every process and every build.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let d = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The engine's compatibility fingerprint, as short hex.
pub(crate) fn engine_fingerprint(engine: &wasmtime::Engine) -> String {
    let mut h = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    hex::encode(&h.0.finalize()[..12])
}

/// A directory of `<digest>-<engine fingerprint>.cwasm` files.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    fingerprint: String,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl DiskCache {
    pub(crate) fn new(dir: PathBuf, engine: &wasmtime::Engine) -> std::io::Result<DiskCache> {
        std::fs::create_dir_all(&dir)?;
        Ok(DiskCache {
            dir,
            fingerprint: engine_fingerprint(engine),
        })
    }

    /// Where the artifact for `digest` lives (whether or not it exists).
    pub(crate) fn path(&self, digest: &str) -> PathBuf {
        self.dir
            .join(format!("{digest}-{}.cwasm", self.fingerprint))
    }

    /// Store an artifact atomically (write a temporary file, then rename).
    pub(crate) fn store(&self, digest: &str, artifact: &[u8]) -> std::io::Result<()> {
        let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{digest}.{}.{seq}.tmp", std::process::id()));
        let result =
            std::fs::write(&tmp, artifact).and_then(|()| std::fs::rename(&tmp, self.path(digest)));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Forget a bad artifact (best effort).
    pub(crate) fn remove(&self, path: &Path) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_sha256_hex() {
        assert_eq!(
            digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn the_fingerprint_is_stable_for_one_engine_config() {
        let a = wasmtime::Engine::default();
        let b = wasmtime::Engine::default();
        assert_eq!(engine_fingerprint(&a), engine_fingerprint(&b));
        let mut cfg = wasmtime::Config::new();
        cfg.consume_fuel(true);
        let c = wasmtime::Engine::new(&cfg).unwrap();
        assert_ne!(engine_fingerprint(&a), engine_fingerprint(&c));
    }

    #[test]
    fn store_writes_the_named_file_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().join("c"), &wasmtime::Engine::default()).unwrap();
        cache.store("abcd", b"artifact").unwrap();
        assert_eq!(std::fs::read(cache.path("abcd")).unwrap(), b"artifact");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("c")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left behind");
    }
}
