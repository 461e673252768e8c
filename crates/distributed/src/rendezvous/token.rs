//! The job token: what lets the rendezvous tell this job's ranks from anything else that
//! reaches the master's port (a port scanner, a stale process of yesterday's job, a
//! second job started on the same port by mistake, an attacker who does not know the
//! secret).
//!
//! Every rank derives the same 32-byte key from the job id and the optional shared
//! secret, `HMAC-SHA256(secret, "ditto-rendezvous-v2 job " + job_id)`, and proves that it
//! holds the key by answering a fresh random challenge with an HMAC of it. Only the
//! nonces and MACs cross the wire, never the key nor the secret, and a MAC recorded
//! from a finished job answers another nonce, so replaying it fails.
//!
//! Without `DITTO_RENDEZVOUS_SECRET`, anyone who knows the job id can compute the key:
//! the token then keeps out accidents (another job, another world size, a stale
//! process, a stray HTTP client), not an attacker. With the secret, only the holders of
//! the secret get in.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{DistError, LaunchEnv, Result};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a nonce and of a MAC on the wire.
pub const NONCE_LEN: usize = 32;
/// Bytes of an HMAC-SHA256 tag.
pub const MAC_LEN: usize = 32;
/// The longest secret read from `DITTO_RENDEZVOUS_SECRET` (HMAC takes any length; this
/// only keeps a wrong variable, such as a whole file pasted in, from going unnoticed).
pub const MAX_SECRET_LEN: usize = 4096;
/// The longest job id.
pub const MAX_JOB_ID_LEN: usize = 1024;

/// Which side of the handshake a MAC is for, so a master's proof cannot be sent back
/// to it as a peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Rank 0, answering a peer's nonce.
    Master,
    /// A non-zero rank, answering the master's challenge.
    Peer,
}

/// What a proof binds besides the key: which side proves, the other side's nonce it
/// answers (`challenge`), its own nonce, and the world size and rank the peer claims.
/// One MAC covers all of them, so none can be changed in transit, and a proof made for
/// one handshake answers no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// Who proves.
    pub side: Side,
    /// The other side's nonce.
    pub challenge: &'a [u8; NONCE_LEN],
    /// The proving side's own nonce.
    pub own_nonce: &'a [u8; NONCE_LEN],
    /// The world size the peer claims.
    pub world: u32,
    /// The rank the peer claims.
    pub rank: u32,
}

/// This job's key, from its id and optional secret. `Debug` never shows the key.
#[derive(Clone)]
pub struct JobToken {
    job_id: String,
    key: [u8; 32],
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
    /// job must pass the same two values.
    pub fn new(job_id: &str, secret: Option<&[u8]>) -> Result<Self> {
        if job_id.is_empty() || job_id.len() > MAX_JOB_ID_LEN {
            return Err(DistError::invalid(
                "JobToken::new",
                format!(
                    "a job id of {} bytes; expected 1..={MAX_JOB_ID_LEN}",
                    job_id.len()
                ),
            ));
        }
        if secret.is_some_and(|s| s.is_empty() || s.len() > MAX_SECRET_LEN) {
            return Err(DistError::invalid(
                "JobToken::new",
                format!("a secret must have 1..={MAX_SECRET_LEN} bytes"),
            ));
        }
        let mut mac = HmacSha256::new_from_slice(secret.unwrap_or_default())
            .expect("HMAC takes keys of any length");
        mac.update(b"ditto-rendezvous-v2 job ");
        mac.update(job_id.as_bytes());
        Ok(JobToken {
            job_id: job_id.to_string(),
            key: mac.finalize().into_bytes().into(),
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
            if s.is_empty() || s.len() > MAX_SECRET_LEN {
                return Err(DistError::Environment {
                    name: "DITTO_RENDEZVOUS_SECRET",
                    message: format!(
                        "has {} bytes; expected 1..={MAX_SECRET_LEN} (or leave it unset)",
                        s.len()
                    ),
                });
            }
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
    /// so that the wire format can be spoken by hand (tests, other clients); the key
    /// itself never leaves this type.
    #[must_use]
    pub fn prove(&self, claim: &Claim<'_>) -> [u8; MAC_LEN] {
        self.mac(claim).finalize().into_bytes().into()
    }

    /// Checks `proof` of `claim` in constant time.
    pub(crate) fn verify(&self, claim: &Claim<'_>, proof: &[u8; MAC_LEN]) -> bool {
        self.mac(claim).verify_slice(proof).is_ok()
    }

    fn mac(&self, claim: &Claim<'_>) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("32-byte key");
        mac.update(match claim.side {
            Side::Master => b"master",
            Side::Peer => b"peer  ",
        });
        mac.update(claim.challenge);
        mac.update(claim.own_nonce);
        mac.update(&claim.world.to_le_bytes());
        mac.update(&claim.rank.to_le_bytes());
        mac
    }
}

/// A fresh nonce from the operating system's random source.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut bytes = [0u8; NONCE_LEN];
    getrandom::fill(&mut bytes).map_err(|e| DistError::Rendezvous {
        address: String::new(),
        message: format!("no random nonce from the operating system: {e}"),
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_depends_on_the_job_id_and_the_secret_and_proofs_on_everything() {
        let a = JobToken::new("job-a", None).unwrap();
        let (n1, n2) = ([1u8; 32], [2u8; 32]);
        let claim = Claim {
            side: Side::Peer,
            challenge: &n1,
            own_nonce: &n2,
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
                challenge: &n2,
                ..claim
            },
            Claim {
                own_nonce: &n1,
                ..claim
            },
            Claim { rank: 2, ..claim },
            Claim { world: 2, ..claim },
        ] {
            assert!(!a.verify(&changed, &proof), "{changed:?}");
        }
        for other in [
            JobToken::new("job-b", None).unwrap(),
            JobToken::new("job-a", Some(b"s")).unwrap(),
        ] {
            assert!(!other.verify(&claim, &proof));
        }
        assert!(!format!("{a:?}").contains(&format!("{:?}", a.key)));
        assert!(JobToken::new("", None).is_err());
        assert!(JobToken::new("x", Some(b"")).is_err());
    }
}
