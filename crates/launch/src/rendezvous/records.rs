//! The two records the rendezvous writes to the store, and where (docs/distributed.md
//! §6): each peer's check-in, MAC'd with the job token, and rank 0's verdict for each
//! peer, sealed with the job token and bound to both sides' nonces, so a verdict
//! recorded from another rendezvous, or written for another rank, does not open.

use super::seal::SEAL_OVERHEAD;
use super::token::{JobToken, MAC_LEN, NONCE_LEN};
use crate::Result;

/// The version byte of both records (the wire format version, docs/distributed.md §6).
pub(crate) const RECORD_VERSION: u8 = 3;
const CHECK_IN_MAGIC: &[u8; 4] = b"DTCI";
/// A check-in record: magic, version, world u32, rank u32, nonce, MAC.
pub(crate) const CHECK_IN_LEN: usize = 4 + 1 + 4 + 4 + NONCE_LEN + MAC_LEN;
/// The largest payload a verdict carries (NCCL's id is 128 bytes).
pub const MAX_PAYLOAD: usize = 1 << 16;

/// Where one rendezvous's keys live in the store: `BASE/check-in/RANK`,
/// `BASE/verdict/RANK` and `BASE/receipt/RANK` (the peer read its verdict).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    base: String,
}

impl Keys {
    /// Keys under `base`.
    #[must_use]
    pub fn new(base: impl Into<String>) -> Keys {
        Keys { base: base.into() }
    }

    /// ditto's own store, which serves one rendezvous: `ditto/...`.
    #[must_use]
    pub fn own_store() -> Keys {
        Keys::new("ditto")
    }

    /// torchrun's agent store, which outlives restarts: each attempt under its own
    /// prefix, `worker/attempt_N/ditto/...`, as PyTorch's process groups used to prefix
    /// theirs (`/worker/attempt_N`), so a restarted job never reads the keys of the
    /// attempt before.
    #[must_use]
    pub fn torchrun(restart_count: u64) -> Keys {
        Keys::new(format!("worker/attempt_{restart_count}/ditto"))
    }

    pub(crate) fn check_in(&self, rank: usize) -> String {
        format!("{}/check-in/{rank}", self.base)
    }

    pub(crate) fn verdict(&self, rank: usize) -> String {
        format!("{}/verdict/{rank}", self.base)
    }

    pub(crate) fn receipt(&self, rank: usize) -> String {
        format!("{}/receipt/{rank}", self.base)
    }

    /// The prefix every key of this rendezvous starts with.
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }
}

/// The check-in record rank `rank` of `world` writes under `BASE/check-in/RANK`, with a
/// fresh `nonce` (for clients that speak the protocol by hand, and tests).
#[must_use]
pub fn check_in_record(
    token: &JobToken,
    world: u32,
    rank: u32,
    nonce: &[u8; NONCE_LEN],
) -> Vec<u8> {
    CheckIn {
        world,
        rank,
        nonce: *nonce,
    }
    .to_record(token)
}

/// A peer's check-in, as read back from the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckIn {
    pub(crate) world: u32,
    pub(crate) rank: u32,
    pub(crate) nonce: [u8; NONCE_LEN],
}

impl CheckIn {
    pub(crate) fn to_record(self, token: &JobToken) -> Vec<u8> {
        let mut record = Vec::with_capacity(CHECK_IN_LEN);
        record.extend_from_slice(CHECK_IN_MAGIC);
        record.push(RECORD_VERSION);
        record.extend_from_slice(&self.world.to_le_bytes());
        record.extend_from_slice(&self.rank.to_le_bytes());
        record.extend_from_slice(&self.nonce);
        record.extend_from_slice(&token.prove_check_in(self.world, self.rank, &self.nonce));
        record
    }

    /// A check-in record whose MAC `token` verifies; why not, otherwise.
    pub(crate) fn from_record(
        record: &[u8],
        token: &JobToken,
    ) -> std::result::Result<CheckIn, String> {
        if record.len() != CHECK_IN_LEN || &record[..4] != CHECK_IN_MAGIC {
            return Err(format!("is not a ditto check-in ({} bytes)", record.len()));
        }
        if record[4] != RECORD_VERSION {
            return Err(format!(
                "is of rendezvous version {}, rank 0 of version {RECORD_VERSION}: run the \
                 same ditto build on every rank",
                record[4]
            ));
        }
        let word = |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().expect("4 bytes"));
        let check_in = CheckIn {
            world: word(5),
            rank: word(9),
            nonce: record[13..13 + NONCE_LEN]
                .try_into()
                .expect("NONCE_LEN bytes"),
        };
        let mac: [u8; MAC_LEN] = record[13 + NONCE_LEN..].try_into().expect("MAC_LEN bytes");
        if !token.verify_check_in(check_in.world, check_in.rank, &check_in.nonce, &mac) {
            return Err(
                "does not prove the job token: DITTO_JOB_ID (or TORCHELASTIC_RUN_ID) or \
                        DITTO_RENDEZVOUS_SECRET differ between ranks, or another job's process \
                        wrote it"
                    .into(),
            );
        }
        Ok(check_in)
    }
}

/// What rank 0 tells a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Every rank is in: the payload (the NCCL id).
    Go(Vec<u8>),
    /// These ranks did not check in in time.
    TimedOut(Vec<usize>),
    /// These ranks checked in and exited.
    PeerExited(Vec<usize>),
    /// The job cannot form as launched: why.
    Refused(String),
}

const GO: u8 = 0;
const TIMED_OUT: u8 = 1;
const PEER_EXITED: u8 = 2;
const REFUSED: u8 = 3;

impl Verdict {
    fn to_plaintext(&self) -> Vec<u8> {
        let ranks = |status: u8, ranks: &[usize]| {
            let mut bytes = vec![status];
            bytes.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
            for &r in ranks {
                bytes.extend_from_slice(&(r as u32).to_le_bytes());
            }
            bytes
        };
        match self {
            Verdict::Go(payload) => [&[GO][..], payload].concat(),
            Verdict::TimedOut(missing) => ranks(TIMED_OUT, missing),
            Verdict::PeerExited(gone) => ranks(PEER_EXITED, gone),
            Verdict::Refused(reason) => [&[REFUSED][..], reason.as_bytes()].concat(),
        }
    }

    fn from_plaintext(bytes: &[u8], world: usize) -> std::result::Result<Verdict, String> {
        let Some((&status, body)) = bytes.split_first() else {
            return Err("an empty verdict".into());
        };
        let ranks = || -> std::result::Result<Vec<usize>, String> {
            let count = body
                .get(..4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4")));
            match count {
                Some(n) if n as usize <= world && body.len() == 4 + 4 * n as usize => Ok(body[4..]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4")) as usize)
                    .collect()),
                _ => Err(format!(
                    "a rank list of {} bytes for world size {world}",
                    body.len()
                )),
            }
        };
        match status {
            GO => Ok(Verdict::Go(body.to_vec())),
            TIMED_OUT => Ok(Verdict::TimedOut(ranks()?)),
            PEER_EXITED => Ok(Verdict::PeerExited(ranks()?)),
            REFUSED => Ok(Verdict::Refused(String::from_utf8_lossy(body).into_owned())),
            other => Err(format!("verdict status {other}")),
        }
    }

    /// The sealed record of this verdict for `peer`, with rank 0's nonce `own`.
    pub(crate) fn seal(
        &self,
        token: &JobToken,
        peer: &CheckIn,
        own: &[u8; NONCE_LEN],
    ) -> Result<Vec<u8>> {
        let mut record = vec![RECORD_VERSION];
        record.extend_from_slice(own);
        record.extend_from_slice(&token.seal(&context(peer, own), &self.to_plaintext())?);
        Ok(record)
    }

    /// Opens the verdict record meant for `peer` (whose check-in it answers); why not,
    /// when it does not open or make sense.
    pub(crate) fn open(
        record: &[u8],
        token: &JobToken,
        peer: &CheckIn,
    ) -> std::result::Result<Verdict, String> {
        let max = 1 + NONCE_LEN + SEAL_OVERHEAD + 1 + MAX_PAYLOAD;
        if record.len() < 1 + NONCE_LEN || record.len() > max {
            return Err(format!(
                "a verdict record of {} bytes; expected at most {max}",
                record.len()
            ));
        }
        if record[0] != RECORD_VERSION {
            return Err(format!(
                "a verdict of rendezvous version {}, this rank's is {RECORD_VERSION}: run the \
                 same ditto build on every rank",
                record[0]
            ));
        }
        let own: [u8; NONCE_LEN] = record[1..1 + NONCE_LEN]
            .try_into()
            .expect("NONCE_LEN bytes");
        let plaintext = token
            .open(&context(peer, &own), &record[1 + NONCE_LEN..])
            .ok_or_else(|| {
                "rank 0's verdict does not open with this job's key and this check-in: another \
             job's rank 0 wrote it, or DITTO_JOB_ID (or TORCHELASTIC_RUN_ID) or \
             DITTO_RENDEZVOUS_SECRET differ between ranks; nothing in it was used"
                    .to_string()
            })?;
        Verdict::from_plaintext(&plaintext, peer.world as usize)
    }
}

/// What a verdict's seal binds: the label, the world size and rank, the peer's nonce
/// from its check-in and rank 0's nonce of this rendezvous.
fn context(peer: &CheckIn, own: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut context = b"ditto verdict v3 ".to_vec();
    context.extend_from_slice(&peer.world.to_le_bytes());
    context.extend_from_slice(&peer.rank.to_le_bytes());
    context.extend_from_slice(&peer.nonce);
    context.extend_from_slice(own);
    context
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_verdict_opens_only_for_its_check_in() {
        let token = JobToken::new("job", None).unwrap();
        let peer = CheckIn {
            world: 4,
            rank: 2,
            nonce: [9; NONCE_LEN],
        };
        let read = CheckIn::from_record(&peer.to_record(&token), &token).unwrap();
        assert_eq!((read.world, read.rank, read.nonce), (4, 2, peer.nonce));
        let other = JobToken::new("other", None).unwrap();
        assert!(CheckIn::from_record(&peer.to_record(&token), &other).is_err());
        assert!(CheckIn::from_record(b"DTCI", &token).is_err());
        let own = [7; NONCE_LEN];
        for verdict in [
            Verdict::Go(vec![1; 128]),
            Verdict::TimedOut(vec![1, 3]),
            Verdict::PeerExited(vec![2]),
            Verdict::Refused("why".into()),
        ] {
            let record = verdict.seal(&token, &peer, &own).unwrap();
            assert_eq!(Verdict::open(&record, &token, &peer).unwrap(), verdict);
            let replayed = CheckIn {
                nonce: [8; NONCE_LEN],
                ..peer
            };
            assert!(
                Verdict::open(&record, &token, &replayed).is_err(),
                "another check-in"
            );
            assert!(Verdict::open(&record, &token, &CheckIn { rank: 1, ..peer }).is_err());
            assert!(Verdict::open(&record, &other, &peer).is_err());
        }
        assert!(
            Verdict::from_plaintext(&[TIMED_OUT, 9, 0, 0, 0], 4).is_err(),
            "count > world"
        );
        assert!(Verdict::from_plaintext(&[], 4).is_err());
    }
}
