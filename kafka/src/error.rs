//! The Kafka backend's errors. Each names what it was doing: the broker, the topic-partition,
//! the offset or the group.

use kafka_protocol::error::ResponseError;
use riffle::errors::BackendErrorKind;

/// A Kafka error code, shown as Kafka names it (`NOT_COORDINATOR (16)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode(pub i16);

impl ErrorCode {
    /// Whether Kafka marks the error as retriable.
    pub fn is_retriable(self) -> bool {
        ResponseError::try_from_code(self.0).is_some_and(|e| e.is_retriable())
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match ResponseError::try_from_code(self.0) {
            Some(ResponseError::Unknown(_)) | None => write!(f, "error code {}", self.0),
            Some(e) => write!(f, "{e:?} ({})", self.0),
        }
    }
}

/// Everything that can go wrong talking to a Kafka cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A broker could not be reached, or the connection broke.
    #[error("broker {broker}: {what}: {source}")]
    Io {
        /// `host:port`.
        broker: String,
        /// What was being done.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A request could not be encoded, or a response decoded.
    #[error("cannot decode or encode {api}: {reason}")]
    Decode {
        /// The API (`StreamsGroupHeartbeat`, `Fetch`, …).
        api: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The broker answered a request with an error.
    #[error("{api} {context}: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The API.
        api: &'static str,
        /// What the request was about: topic-partition, offset, group, member.
        context: String,
        /// Kafka's error code.
        code: ErrorCode,
        /// The broker's message, if it sent one.
        message: Option<String>,
    },
    /// The broker does not speak a version riffle needs.
    #[error(
        "broker {broker} does not support {api} version {needed} (it supports {min}..={max}); riffle needs Apache Kafka 4.2 or later"
    )]
    UnsupportedVersion {
        /// The broker.
        broker: String,
        /// The API.
        api: &'static str,
        /// The version riffle sends.
        needed: i16,
        /// The broker's lowest version.
        min: i16,
        /// The broker's highest version (-1: not supported at all).
        max: i16,
    },
    /// A fetched batch cannot be read.
    #[error("{topic}-{partition} at offset {offset}: {reason}")]
    Batch {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The batch's base offset.
        offset: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// The group's state forbids going on (fatal heartbeat errors, shutdown requests).
    #[error("streams group {group}: {reason}")]
    Group {
        /// The group (application id).
        group: String,
        /// What happened.
        reason: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {millis} ms: {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long riffle waited.
        millis: u64,
    },
    /// The configuration is not usable.
    #[error("invalid Kafka configuration: {0}")]
    Config(String),
}

impl ErrorCode {
    /// How the runtime should take this code.
    pub fn kind(self) -> BackendErrorKind {
        match ResponseError::try_from_code(self.0) {
            Some(ResponseError::OffsetOutOfRange) => BackendErrorKind::OffsetOutOfRange,
            Some(
                ResponseError::FencedMemberEpoch
                | ResponseError::FencedInstanceId
                | ResponseError::ProducerFenced
                | ResponseError::InvalidProducerEpoch
                | ResponseError::InvalidProducerIdMapping
                | ResponseError::StreamsTopologyFenced
                // A transactional offset commit by a member that lost its tasks.
                | ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::StaleMemberEpoch,
            ) => BackendErrorKind::Fenced,
            Some(
                ResponseError::TopicAuthorizationFailed
                | ResponseError::GroupAuthorizationFailed
                | ResponseError::ClusterAuthorizationFailed
                | ResponseError::TransactionalIdAuthorizationFailed
                | ResponseError::SaslAuthenticationFailed
                | ResponseError::DelegationTokenAuthorizationFailed,
            ) => BackendErrorKind::Authorization,
            Some(e) if e.is_retriable() => BackendErrorKind::Unavailable,
            Some(ResponseError::Unknown(_) | ResponseError::UnknownServerError) | None => {
                BackendErrorKind::Other
            }
            Some(_) => BackendErrorKind::Rejected,
        }
    }
}

impl Error {
    /// How the runtime should take this error: matchable as
    /// [`riffle::Error::backend_kind`] once converted.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            Error::Io { .. } | Error::Timeout { .. } => BackendErrorKind::Unavailable,
            Error::Broker { code, .. } => code.kind(),
            Error::UnsupportedVersion { .. } | Error::Config(_) => BackendErrorKind::Rejected,
            Error::Group { .. } => BackendErrorKind::Group,
            Error::Decode { .. } | Error::Batch { .. } => BackendErrorKind::Other,
        }
    }
}

impl From<Error> for riffle::Error {
    fn from(e: Error) -> Self {
        riffle::Error::backend(e.kind(), e)
    }
}

/// The Kafka backend's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(code: i16) -> riffle::Error {
        Error::Broker {
            api: "StreamsGroupHeartbeat",
            context: "group g".into(),
            code: ErrorCode(code),
            message: None,
        }
        .into()
    }

    #[test]
    fn kafka_errors_reach_the_runtime_with_a_kind_to_match_on() {
        let kind = |code| broker(code).backend_kind();
        assert_eq!(
            kind(110),
            Some(BackendErrorKind::Fenced),
            "FENCED_MEMBER_EPOCH"
        );
        assert_eq!(kind(90), Some(BackendErrorKind::Fenced), "PRODUCER_FENCED");
        assert_eq!(
            kind(1),
            Some(BackendErrorKind::OffsetOutOfRange),
            "OFFSET_OUT_OF_RANGE"
        );
        assert!(broker(1).is_offset_out_of_range());
        assert_eq!(
            kind(47),
            Some(BackendErrorKind::Fenced),
            "INVALID_PRODUCER_EPOCH"
        );
        assert_eq!(
            kind(30),
            Some(BackendErrorKind::Authorization),
            "GROUP_AUTHORIZATION_FAILED"
        );
        assert_eq!(
            kind(29),
            Some(BackendErrorKind::Authorization),
            "TOPIC_AUTHORIZATION_FAILED"
        );
        assert_eq!(
            kind(58),
            Some(BackendErrorKind::Authorization),
            "SASL_AUTHENTICATION_FAILED"
        );
        assert_eq!(
            kind(6),
            Some(BackendErrorKind::Unavailable),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(
            kind(10),
            Some(BackendErrorKind::Rejected),
            "MESSAGE_TOO_LARGE"
        );
        assert_eq!(
            kind(-1),
            Some(BackendErrorKind::Other),
            "UNKNOWN_SERVER_ERROR"
        );
        let io: riffle::Error = Error::Timeout {
            what: "a fetch".into(),
            millis: 30_000,
        }
        .into();
        assert_eq!(io.backend_kind(), Some(BackendErrorKind::Unavailable));
        let group: riffle::Error = Error::Group {
            group: "g".into(),
            reason: "topology changed".into(),
        }
        .into();
        assert_eq!(group.backend_kind(), Some(BackendErrorKind::Group));
        // The message is the backend's own.
        assert!(
            broker(110).to_string().contains("FencedMemberEpoch"),
            "{}",
            broker(110)
        );
    }
}
