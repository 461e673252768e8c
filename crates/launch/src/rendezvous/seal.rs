//! Sealing what rank 0 writes to the store: XChaCha20-Poly1305 (crate
//! `chacha20poly1305`) under the job token's seal key, with a fresh random 24-byte nonce
//! per record (random nonces of that length never repeat in practice) and the record's
//! context as associated data. Opening fails unless the key, the context and every byte
//! of the record are the ones sealed: a client of the same store that lacks the key can
//! neither read the NCCL id nor change it unnoticed, nor move a record to another rank or
//! another rendezvous.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::token::JobToken;
use crate::{LaunchError, Result};

/// Bytes of the nonce in front of a sealed record.
pub(crate) const SEAL_NONCE_LEN: usize = 24;
/// Bytes the seal adds to the plaintext: the nonce and Poly1305's 16-byte tag.
pub(crate) const SEAL_OVERHEAD: usize = SEAL_NONCE_LEN + 16;

impl JobToken {
    /// `nonce ‖ ciphertext ‖ tag` of `plaintext`, bound to `context`.
    pub(crate) fn seal(&self, context: &[u8], plaintext: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; SEAL_NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| LaunchError::Rendezvous {
            address: String::new(),
            message: format!("no random nonce from the operating system: {e}"),
        })?;
        let cipher = XChaCha20Poly1305::new((&self.seal_key).into());
        let sealed = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: context,
                },
            )
            .map_err(|_| LaunchError::invalid("seal", "the plaintext is too long to seal"))?;
        let mut record = nonce.to_vec();
        record.extend_from_slice(&sealed);
        Ok(record)
    }

    /// The plaintext of a record [`seal`](Self::seal)ed with this token's key and
    /// `context`; `None` for anything else (another key, another context, a changed or
    /// truncated record).
    pub(crate) fn open(&self, context: &[u8], record: &[u8]) -> Option<Vec<u8>> {
        if record.len() < SEAL_OVERHEAD {
            return None;
        }
        let (nonce, sealed) = record.split_at(SEAL_NONCE_LEN);
        XChaCha20Poly1305::new((&self.seal_key).into())
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: context,
                },
            )
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_opens_only_with_its_key_and_context_and_hides_the_plaintext() {
        let secret = b"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
        let token = JobToken::new("job", Some(secret)).unwrap();
        let id = [0x5au8; 128];
        let record = token.seal(b"rank 1", &id).unwrap();
        assert_eq!(record.len(), id.len() + SEAL_OVERHEAD);
        assert!(!record.windows(16).any(|w| w == &id[..16]), "encrypted");
        assert_eq!(token.open(b"rank 1", &record).unwrap(), id);
        assert_ne!(token.seal(b"rank 1", &id).unwrap(), record, "fresh nonce");
        assert!(token.open(b"rank 2", &record).is_none());
        assert!(JobToken::new("job", None)
            .unwrap()
            .open(b"rank 1", &record)
            .is_none());
        for at in [0, SEAL_NONCE_LEN, record.len() - 1] {
            let mut changed = record.clone();
            changed[at] ^= 1;
            assert!(token.open(b"rank 1", &changed).is_none(), "byte {at}");
        }
        assert!(token.open(b"rank 1", &record[..record.len() - 1]).is_none());
        assert!(token.open(b"rank 1", &[]).is_none());
    }
}
