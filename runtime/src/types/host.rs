//! Where an application instance answers interactive queries ([`HostInfo`]), and what it
//! holds ([`StreamsMetadata`]).

use std::collections::BTreeSet;
use std::str::FromStr;

use riffle_record::TopicPartition;

use crate::types::error::{Error, Result};

/// An instance's endpoint: the host and port it answers interactive queries at (Kafka's
/// `HostInfo`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostInfo {
    /// The host name or address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl HostInfo {
    /// `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        HostInfo {
            host: host.into(),
            port,
        }
    }
}

impl std::fmt::Display for HostInfo {
    /// `host:port`, an IPv6 address in brackets (`[::1]:8080`), as a URL's authority.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl HostInfo {
    /// Whether other instances can reach it: not port 0 and not an unspecified address
    /// (`0.0.0.0`, `::`), which name no host.
    pub(crate) fn check_reachable(&self) -> Result<()> {
        let unspecified = self
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if self.port == 0 || unspecified {
            return Err(Error::Config(format!(
                "application_server {self} is not an address other instances can reach: name the host and port this instance answers queries at"
            )));
        }
        Ok(())
    }
}

impl FromStr for HostInfo {
    type Err = Error;
    /// `host:port` (the host may be a bracketed IPv6 address).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::Config(format!(
                "application_server must be host:port with a port of 0-65535, not {s:?}"
            ))
        };
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        let port = port.parse().map_err(|_| bad())?;
        Ok(HostInfo::new(host, port))
    }
}

/// One instance of the application: its endpoint and the topic partitions of its active and
/// standby tasks (Kafka's `StreamsMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsMetadata {
    /// Where it answers queries.
    pub host_info: HostInfo,
    /// The input partitions of its active tasks.
    pub active_partitions: BTreeSet<TopicPartition>,
    /// The input partitions of its standby tasks.
    pub standby_partitions: BTreeSet<TopicPartition>,
}

impl StreamsMetadata {
    /// An instance at `host_info` with these partitions.
    pub fn new(
        host_info: HostInfo,
        active_partitions: BTreeSet<TopicPartition>,
        standby_partitions: BTreeSet<TopicPartition>,
    ) -> Self {
        StreamsMetadata {
            host_info,
            active_partitions,
            standby_partitions,
        }
    }
}
