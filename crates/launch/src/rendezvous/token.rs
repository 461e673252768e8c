//! The job token: what lets the rendezvous tell this job's ranks from anything else that
//! reaches its store (a port scanner, a stale process of yesterday's job, a second job
//! started on the same port by mistake, an attacker who does not know the secret).
//!
//! Every rank derives the same two 32-byte keys from the job id and the optional shared
//! secret with HKDF-SHA256: a MAC key (HMAC-SHA256 proofs that a side holds the key) and
//! a seal key (XChaCha20-Poly1305 over what rank 0 writes to the store, `seal.rs`). Only
//! nonces, MACs and sealed records cross the wire, never a key nor the secret.
//!
//! Without `DITTO_RENDEZVOUS_SECRET`, anyone who knows the job id can compute both keys:
//! the token then keeps out accidents (another job on the same port, another world
//! size, a stale process, a stray HTTP client), not an attacker. With the secret, only
//! its holders get in or read the NCCL id; a secret must carry at least
//! [`MIN_SECRET_BITS`] bits, because a MAC seen on the wire lets anyone test guesses of a
//! short one offline.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{LaunchEnv, LaunchError, Result};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a nonce on the wire.
pub const NONCE_LEN: usize = 32;
/// Bytes of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// The longest secret read from `DITTO_RENDEZVOUS_SECRET` (this only keeps a wrong
/// variable, such as a whole file pasted in, from going unnoticed).
pub const MAX_SECRET_LEN: usize = 4096;
/// The longest job id.
pub const MAX_JOB_ID_LEN: usize = 1024;
/// The fewest bits of entropy a secret must show ([`estimated_secret_bits`]).
pub const MIN_SECRET_BITS: u32 = 128;

/// The HKDF salt, which also names the wire format version the keys belong to.
const KDF_SALT: &[u8] = b"ditto-rendezvous-v3";

/// Which side of the connection handshake a MAC is for, so a master's proof cannot be
/// sent back to it as a peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Rank 0's store, answering a peer's proof.
    Master,
    /// A non-zero rank, proving itself first.
    Peer,
}

/// What a handshake proof binds besides the key: which side proves, both sides' fresh
/// nonces, and the world size and rank the peer claims. One MAC covers all of them, so
/// none can be changed in transit, and a proof made for one handshake answers no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// Who proves.
    pub side: Side,
    /// The nonce the peer sent in its check-in.
    pub peer_nonce: &'a [u8; NONCE_LEN],
    /// The nonce the master sent in its challenge.
    pub master_nonce: &'a [u8; NONCE_LEN],
    /// The world size the peer claims.
    pub world: u32,
    /// The rank the peer claims.
    pub rank: u32,
}

/// This job's keys, from its id and optional secret. `Debug` never shows a key.
#[derive(Clone)]
pub struct JobToken {
    job_id: String,
    mac_key: [u8; 32],
    /// Read by `seal.rs`.
    pub(super) seal_key: [u8; 32],
    has_secret: bool,
}

impl std::fmt::Debug for JobToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobToken")
            .field("job_id", &self.job_id)
            .field("has_secret", &self.has_secret)
            .finish_non_exhaustive()
    }
}

impl JobToken {
    /// The token of job `job_id`, with `secret` mixed in when given. Every rank of one
    /// job must pass the same two values. A secret that shows fewer than
    /// [`MIN_SECRET_BITS`] bits is refused.
    pub fn new(job_id: &str, secret: Option<&[u8]>) -> Result<Self> {
        if job_id.is_empty() || job_id.len() > MAX_JOB_ID_LEN {
            return Err(LaunchError::invalid(
                "JobToken::new",
                format!(
                    "a job id of {} bytes; expected 1..={MAX_JOB_ID_LEN}",
                    job_id.len()
                ),
            ));
        }
        if let Some(secret) = secret {
            check_secret(secret)
                .map_err(|message| LaunchError::invalid("JobToken::new", message))?;
        }
        let kdf = Hkdf::<Sha256>::new(Some(KDF_SALT), secret.unwrap_or_default());
        let derive = |label: &[u8]| {
            let mut key = [0u8; 32];
            kdf.expand_multi_info(&[label, job_id.as_bytes()], &mut key)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            key
        };
        Ok(JobToken {
            job_id: job_id.to_string(),
            mac_key: derive(b"mac key for job "),
            seal_key: derive(b"seal key for job "),
            has_secret: secret.is_some(),
        })
    }

    /// The token of the job `env` describes: its [`LaunchEnv::job_id`] and the secret in
    /// `DITTO_RENDEZVOUS_SECRET`, if set.
    pub fn from_env(env: &LaunchEnv) -> Result<Self> {
        JobToken::from_vars(env, |name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the secret read through `get` (for tests).
    pub fn from_vars(env: &LaunchEnv, get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let secret = get("DITTO_RENDEZVOUS_SECRET");
        if let Some(s) = &secret {
            check_secret(s.as_bytes()).map_err(|message| LaunchError::Environment {
                name: "DITTO_RENDEZVOUS_SECRET",
                message,
            })?;
        }
        JobToken::new(&env.job_id, secret.as_deref().map(str::as_bytes))
    }

    /// The job id the token was made from.
    #[must_use]
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// Whether a shared secret is mixed in.
    #[must_use]
    pub fn has_secret(&self) -> bool {
        self.has_secret
    }

    /// The MAC that proves `claim.side` holds the key, over the whole [`Claim`]. Public
    /// so that the wire format can be spoken by hand (tests, other clients); the keys
    /// themselves never leave this type.
    #[must_use]
    pub fn prove(&self, claim: &Claim<'_>) -> [u8; MAC_LEN] {
        self.gate_mac(claim).finalize().into_bytes().into()
    }

    fn gate_mac(&self, claim: &Claim<'_>) -> HmacSha256 {
        let side: &[u8] = match claim.side {
            Side::Master => b"master",
            Side::Peer => b"peer  ",
        };
        self.mac(
            b"ditto gate ",
            &[
                side,
                claim.peer_nonce,
                claim.master_nonce,
                &claim.world.to_le_bytes(),
                &claim.rank.to_le_bytes(),
            ],
        )
    }

    /// Checks `proof` of `claim` in constant time.
    pub(crate) fn verify(&self, claim: &Claim<'_>, proof: &[u8; MAC_LEN]) -> bool {
        self.gate_mac(claim).verify_slice(proof).is_ok()
    }

    /// The MAC of a rank's check-in record in the store (`exchange.rs`): its world size,
    /// rank and fresh nonce. Public for the same reason as [`prove`](Self::prove).
    #[must_use]
    pub fn prove_check_in(&self, world: u32, rank: u32, nonce: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
        self.check_in_mac(world, rank, nonce)
            .finalize()
            .into_bytes()
            .into()
    }

    fn check_in_mac(&self, world: u32, rank: u32, nonce: &[u8; NONCE_LEN]) -> HmacSha256 {
        self.mac(
            b"ditto check-in ",
            &[&world.to_le_bytes(), &rank.to_le_bytes(), nonce],
        )
    }

    /// Checks a check-in record's MAC in constant time.
    pub(crate) fn verify_check_in(
        &self,
        world: u32,
        rank: u32,
        nonce: &[u8; NONCE_LEN],
        proof: &[u8; MAC_LEN],
    ) -> bool {
        self.check_in_mac(world, rank, nonce)
            .verify_slice(proof)
            .is_ok()
    }

    /// HMAC-SHA256 under the MAC key of a label and fixed-length fields (so no two
    /// different inputs concatenate to the same bytes).
    /// (`verify_slice` on the result compares in constant time.)
    fn mac(&self, label: &[u8], fields: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.mac_key).expect("HMAC takes any key");
        mac.update(label);
        for field in fields {
            mac.update(field);
        }
        mac
    }
}

/// A lower-bound guess of a secret's entropy from its length and the character classes
/// it uses: `length × log2(alphabet)`, where the alphabet is 16 for a hex string, else
/// the sum of the classes present (digits 10, lower case 26, upper case 26, other
/// printable ASCII and space 33, other bytes 128). It catches secrets that are too short for their
/// alphabet; it cannot tell a random secret from a predictable one of the same shape.
#[must_use]
pub fn estimated_secret_bits(secret: &[u8]) -> u32 {
    let hex =
        secret.iter().all(u8::is_ascii_hexdigit) && secret.iter().any(u8::is_ascii_alphabetic);
    let alphabet: u32 = if hex {
        16
    } else {
        let has = |class: fn(&u8) -> bool| secret.iter().any(class);
        [
            (has(u8::is_ascii_digit), 10),
            (has(u8::is_ascii_lowercase), 26),
            (has(u8::is_ascii_uppercase), 26),
            (
                has(|b| (b.is_ascii_graphic() || *b == b' ') && !b.is_ascii_alphanumeric()),
                33,
            ),
            (has(|b| !b.is_ascii_graphic() && *b != b' '), 128),
        ]
        .iter()
        .filter(|(present, _)| *present)
        .map(|(_, size)| size)
        .sum()
    };
    (secret.len() as f64 * f64::from(alphabet.max(1)).log2()).floor() as u32
}

/// Refuses a secret that is empty, too long, or shows fewer than [`MIN_SECRET_BITS`].
fn check_secret(secret: &[u8]) -> std::result::Result<(), String> {
    if secret.is_empty() || secret.len() > MAX_SECRET_LEN {
        return Err(format!(
            "has {} bytes; expected 1..={MAX_SECRET_LEN} (or leave it unset)",
            secret.len()
        ));
    }
    let bits = estimated_secret_bits(secret);
    if bits < MIN_SECRET_BITS {
        return Err(format!(
            "looks like at most {bits} bits of entropy ({} bytes); at least {MIN_SECRET_BITS} \
             are needed, since a proof seen on the wire lets anyone test guesses offline: \
             make one with `openssl rand -hex 32` or `head -c 32 /dev/urandom | base64`",
            secret.len()
        ));
    }
    Ok(())
}

/// A fresh nonce from the operating system's random source (also what a backend hands
/// its ranks through [`Rendezvous::exchange`](super::Rendezvous::exchange) when the
/// payload only needs to be unguessable).
pub fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut bytes = [0u8; NONCE_LEN];
    getrandom::fill(&mut bytes).map_err(|e| LaunchError::Rendezvous {
        address: String::new(),
        message: format!("no random nonce from the operating system: {e}"),
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

    #[test]
    fn the_keys_depend_on_the_job_id_and_the_secret_and_proofs_on_everything() {
        let a = JobToken::new("job-a", None).unwrap();
        let (n1, n2) = ([1u8; 32], [2u8; 32]);
        let claim = Claim {
            side: Side::Peer,
            peer_nonce: &n1,
            master_nonce: &n2,
            world: 4,
            rank: 1,
        };
        let proof = a.prove(&claim);
        assert!(a.verify(&claim, &proof));
        for changed in [
            Claim {
                side: Side::Master,
                ..claim
            },
            Claim {
                peer_nonce: &n2,
                ..claim
            },
            Claim {
                master_nonce: &n1,
                ..claim
            },
            Claim { rank: 2, ..claim },
            Claim { world: 2, ..claim },
        ] {
            assert!(!a.verify(&changed, &proof), "{changed:?}");
        }
        for other in [
            JobToken::new("job-b", None).unwrap(),
            JobToken::new("job-a", Some(SECRET)).unwrap(),
        ] {
            assert!(!other.verify(&claim, &proof));
            assert_ne!(other.seal_key, a.seal_key);
        }
        assert_ne!(a.mac_key, a.seal_key, "one key per use");
        assert!(a.verify_check_in(4, 1, &n1, &a.prove_check_in(4, 1, &n1)));
        assert!(!a.verify_check_in(4, 2, &n1, &a.prove_check_in(4, 1, &n1)));
        let shown = format!("{a:?}");
        assert!(!shown.contains(&format!("{:?}", a.mac_key)) && !shown.contains("seal_key"));
        assert!(JobToken::new("", None).is_err());
        assert!(JobToken::new("x", Some(b"")).is_err());
    }

    #[test]
    fn short_or_low_entropy_secrets_are_refused_and_random_ones_accepted() {
        for weak in [
            &b"s3cret"[..],
            b"0123456789abcdef0123456789abcde", // 31 hex digits: 124 bits
            b"correct horse battery",
        ] {
            let err = JobToken::new("job", Some(weak)).unwrap_err().to_string();
            assert!(err.contains("at least 128"), "{err}");
        }
        for strong in [
            SECRET,
            b"0123456789abcdef0123456789abcdef", // 32 hex digits: 128 bits
            b"q4Gm8Rz0Lk2vX9wT5nB7cY1dHs6Jf3Ue", // 32 base64-like characters
        ] {
            JobToken::new("job", Some(strong)).unwrap();
        }
        assert_eq!(estimated_secret_bits(SECRET), 256);
    }
}
