//! Why a session could not be admitted, with the SQLSTATE the session reports.

use std::fmt;

use pgtier_policy::tiers::TierAdmitError;
use pgtier_policy::{AdmitError, ServiceClass};

use crate::counters::CounterError;

/// Why a session could not be admitted. The session answers with an ErrorResponse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionError {
    /// Every replica is Down.
    NoReplicaUp,
    /// Every replica the class may use is Down (dedicated routing).
    NoReplicaForClass(ServiceClass),
    /// The control shard's queue is full (`control_queue_capacity`).
    ControlQueueFull,
    /// No answer within the caller's timeout (blocking admissions only).
    Timeout,
    /// The control shard has stopped (shutdown).
    ControlStopped,
    /// A role change could not be applied or a counter could not be taken: a bug; the text
    /// says what.
    Internal(String),
}

impl AdmissionError {
    /// SQLSTATE for the ErrorResponse.
    pub const fn sqlstate(&self) -> &'static str {
        match self {
            // cannot_connect_now: the replicas are not accepting sessions.
            AdmissionError::NoReplicaUp
            | AdmissionError::NoReplicaForClass(_)
            | AdmissionError::ControlStopped => "57P03",
            // too_many_connections: the control shard is overloaded.
            AdmissionError::ControlQueueFull | AdmissionError::Timeout => "53300",
            AdmissionError::Internal(_) => "XX000",
        }
    }
}

impl fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionError::NoReplicaUp => f.write_str("no replica is available"),
            AdmissionError::NoReplicaForClass(class) => {
                write!(f, "no replica is available for {class} sessions")
            }
            AdmissionError::ControlQueueFull => {
                f.write_str("too many sessions waiting for a replica; raise control_queue_capacity")
            }
            AdmissionError::Timeout => f.write_str("timed out waiting for a replica assignment"),
            AdmissionError::ControlStopped => f.write_str("the proxy is shutting down"),
            AdmissionError::Internal(text) => write!(f, "internal routing error: {text}"),
        }
    }
}

impl std::error::Error for AdmissionError {}

impl From<AdmitError> for AdmissionError {
    fn from(error: AdmitError) -> AdmissionError {
        match error {
            AdmitError::NoReplicaUp => AdmissionError::NoReplicaUp,
            AdmitError::NoReplicaForClass(class) => AdmissionError::NoReplicaForClass(class),
            AdmitError::LoadCount { .. } => AdmissionError::Internal(error.to_string()),
        }
    }
}

impl From<TierAdmitError> for AdmissionError {
    fn from(error: TierAdmitError) -> AdmissionError {
        match error {
            TierAdmitError::NoReplicaUp => AdmissionError::NoReplicaUp,
            other => AdmissionError::Internal(other.to_string()),
        }
    }
}

impl From<CounterError> for AdmissionError {
    fn from(error: CounterError) -> AdmissionError {
        AdmissionError::Internal(format!("session counter: {error}"))
    }
}
