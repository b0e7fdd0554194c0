//! `TaskId`: one task per sub-topology × input partition, written `0_3`.

use std::fmt;
use std::str::FromStr;

/// Identifies a task: sub-topology `subtopology`, input partition `partition`.
///
/// Written and parsed as `<subtopology>_<partition>`, e.g. `0_3`, which is also the name of the
/// task's directory under the state directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// Sub-topology number (0, 1, 2 … in the topology's deterministic order).
    pub subtopology: u32,
    /// Input partition number.
    pub partition: u32,
}

impl TaskId {
    /// A task id from its two parts.
    pub const fn new(subtopology: u32, partition: u32) -> Self {
        Self {
            subtopology,
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

/// The text was not of the form `<u32>_<u32>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid task id {text:?}: expected <subtopology>_<partition>, e.g. 0_3")]
pub struct ParseTaskIdError {
    /// The text that failed to parse.
    pub text: String,
}

impl FromStr for TaskId {
    type Err = ParseTaskIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseTaskIdError { text: s.to_owned() };
        let (sub, part) = s.split_once('_').ok_or_else(err)?;
        // `u32::from_str` accepts a leading '+'; a directory name like `+0_1` is not a task.
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(sub) || !digits(part) {
            return Err(err());
        }
        Ok(Self {
            subtopology: sub.parse().map_err(|_| err())?,
            partition: part.parse().map_err(|_| err())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_and_parses_underscore_form() {
        let id = TaskId::new(0, 3);
        assert_eq!(id.to_string(), "0_3");
        assert_eq!("0_3".parse::<TaskId>(), Ok(id));
        assert_eq!(
            "12_4000000000".parse::<TaskId>(),
            Ok(TaskId::new(12, 4_000_000_000))
        );
    }

    #[test]
    fn rejects_other_names() {
        for bad in [
            "",
            "0",
            "0_",
            "_3",
            "a_1",
            "+0_1",
            "0_3_1",
            "0-3",
            "99999999999_1",
            ".lock",
        ] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?} parsed");
        }
    }
}
