//! Tenant secrets at rest: sealed with XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`) under a key from `SUTRA_SECRET_KEY`, bound to their
//! tenant and name (the associated data), with key rotation.
//!
//! Invariants:
//! - a value is stored only sealed; its row names the key that sealed it
//!   (the first 8 hex digits of the key's sha256), never the key;
//! - a sealed value opens only under its key and for its own tenant and
//!   name (moving a ciphertext to another row fails to open);
//! - rotation: the new key is `SUTRA_SECRET_KEY`, the old ones stay in
//!   `SUTRA_SECRET_PREVIOUS_KEYS` while rows sealed by them are re-sealed
//!   (`serve` does it at start); reads work throughout;
//! - [`Keyring`]'s `Debug` shows key ids only.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// A sealed value as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

/// The current key and the previous ones.
pub struct Keyring {
    keys: Vec<Key>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

/// 32 bytes as 64 hex digits or base64.
fn parse_key(text: &str) -> Result<[u8; 32], String> {
    use base64::Engine;
    let t = text.trim();
    let bytes = if t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(t).map_err(|e| e.to_string())?
    } else {
        base64::engine::general_purpose::STANDARD
            .decode(t)
            .map_err(|_| "a secret key is 32 bytes, as 64 hex digits or base64".to_string())?
    };
    bytes
        .try_into()
        .map_err(|_| "a secret key is 32 bytes, as 64 hex digits or base64".to_string())
}

fn aad(tenant: &str, name: &str) -> Vec<u8> {
    format!("sutra-secret\0{tenant}\0{name}").into_bytes()
}

impl Keyring {
    /// The current key and the previous ones (text as in the environment).
    pub fn new(current: &str, previous: &[String]) -> Result<Keyring, String> {
        let mut keys = Vec::new();
        for text in std::iter::once(current).chain(previous.iter().map(String::as_str)) {
            let raw = parse_key(text)?;
            let id = hex::encode(&Sha256::digest(raw)[..4]);
            let cipher = XChaCha20Poly1305::new((&raw).into());
            keys.push(Key { id, cipher });
        }
        Ok(Keyring { keys })
    }

    /// The id of the key new values are sealed with.
    pub fn current_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Seal a value under the current key.
    pub fn seal(&self, tenant: &str, name: &str, value: &[u8]) -> Result<Sealed, String> {
        let key = &self.keys[0];
        let mut nonce = [0u8; 24];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = key
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: value,
                    aad: &aad(tenant, name),
                },
            )
            .map_err(|_| "cannot seal the secret".to_string())?;
        Ok(Sealed {
            key_id: key.id.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Open a sealed value of `tenant`'s secret `name`.
    pub fn open(&self, tenant: &str, name: &str, sealed: &Sealed) -> Result<Vec<u8>, String> {
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| {
                format!(
                    "secret `{name}` is sealed by key {}, which is neither SUTRA_SECRET_KEY nor in SUTRA_SECRET_PREVIOUS_KEYS",
                    sealed.key_id
                )
            })?;
        if sealed.nonce.len() != 24 {
            return Err(format!("secret `{name}`: a stored nonce is malformed"));
        }
        key.cipher
            .decrypt(
                XNonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad(tenant, name),
                },
            )
            .map_err(|_| format!("secret `{name}` does not open (tampered with, or moved)"))
    }

    /// Whether `sealed` should be re-sealed under the current key.
    pub fn is_stale(&self, sealed: &Sealed) -> bool {
        sealed.key_id != self.keys[0].id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "0000000000000000000000000000000000000000000000000000000000000001";
    const K2: &str = "0000000000000000000000000000000000000000000000000000000000000002";

    #[test]
    fn sealed_values_open_for_their_row_only() {
        let ring = Keyring::new(K1, &[]).unwrap();
        let s = ring.seal("acme", "stripe", b"sk_live_1").unwrap();
        assert!(!s.ciphertext.windows(9).any(|w| w == b"sk_live_1"));
        assert_eq!(ring.open("acme", "stripe", &s).unwrap(), b"sk_live_1");
        assert!(ring.open("other", "stripe", &s).is_err());
        assert!(ring.open("acme", "paypal", &s).is_err());
        let mut t = s.clone();
        t.ciphertext[0] ^= 1;
        assert!(ring.open("acme", "stripe", &t).is_err());
        assert!(!format!("{ring:?}").contains(K1));
    }

    #[test]
    fn rotation_reads_old_values_and_seals_new_ones_under_the_new_key() {
        let old = Keyring::new(K1, &[]).unwrap();
        let s = old.seal("acme", "x", b"v").unwrap();
        let rotated = Keyring::new(K2, &[K1.to_string()]).unwrap();
        assert!(rotated.is_stale(&s));
        assert_eq!(rotated.open("acme", "x", &s).unwrap(), b"v");
        let s2 = rotated.seal("acme", "x", b"v").unwrap();
        assert!(!rotated.is_stale(&s2));
        assert!(old.open("acme", "x", &s2).is_err());
        assert!(Keyring::new("short", &[]).is_err());
    }
}
