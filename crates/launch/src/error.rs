//! The crate's one error type.
//!
//! Its messages are the ones `distributed` printed before the job formation code moved
//! here (`LaunchError` wraps this type transparently), so logs, tests and scripts that
//! read them did not change.

use std::time::Duration;

/// Shorthand for results in `launch`.
pub type Result<T, E = LaunchError> = std::result::Result<T, E>;

/// Everything that can go wrong while a job forms: a launch variable, the rendezvous,
/// the store. Every variant says what happened and, where it applies, which ranks were
/// involved, so a failure on one rank of many can be read from its log alone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// An argument outside its valid range (a rank past the world size, a short secret, ...).
    #[error("{op}: invalid argument: {message}")]
    InvalidArgument {
        /// Where.
        op: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// Some ranks did not arrive in time.
    #[error("{op}: timed out after {timeout:?} waiting for rank(s) {missing:?}")]
    Timeout {
        /// What was being waited for.
        op: String,
        /// The limit that expired.
        timeout: Duration,
        /// The ranks that had not arrived.
        missing: Vec<usize>,
    },
    /// Some ranks left (their process exited or their connection closed) before they
    /// took part.
    #[error("{op}: rank(s) {ranks:?} exited before taking part")]
    PeerExited {
        /// What was being waited for.
        op: String,
        /// The ranks that are gone.
        ranks: Vec<usize>,
    },
    /// A torchrun-style environment variable is missing or malformed.
    #[error("environment variable {name}: {message}")]
    Environment {
        /// The variable.
        name: &'static str,
        /// What was wrong and what was expected.
        message: String,
    },
    /// The rendezvous store's protocol was violated (a peer sent something unexpected).
    #[error("rendezvous with {address}: {message}")]
    Rendezvous {
        /// The store's address.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// The rendezvous store closed the connection: its host (rank 0, or torchrun's
    /// agent) exited, or the store refused what this rank sent.
    #[error("rendezvous: the store at {address} closed the connection during {during}")]
    StoreClosed {
        /// The store's address.
        address: String,
        /// The query under way.
        during: String,
    },
    /// An operating-system error (sockets).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(feature = "rendezvous")]
impl LaunchError {
    /// A [`LaunchError::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        LaunchError::InvalidArgument {
            op,
            message: message.into(),
        }
    }
}
