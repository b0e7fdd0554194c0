//! Names that become file names: topics and consumer groups.

use crate::error::Error;

/// The longest file name the file systems the log runs on take (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// The longest topic name: Kafka's limit.
pub(crate) const MAX_TOPIC_NAME: usize = 249;

/// The longest group name: its offsets file is `<group>.offsets`, written through
/// `<group>.offsets.tmp`, which must fit [`NAME_MAX`].
pub(crate) const MAX_GROUP_NAME: usize = NAME_MAX - ".offsets.tmp".len();

/// Checks that `name` is safe as a single file-name component: not empty, at most
/// [`MAX_TOPIC_NAME`] bytes for a topic and [`MAX_GROUP_NAME`] for a group, not `.` or `..`,
/// without `/`, `\` or NUL. Topic names are further limited to Kafka's legal characters
/// (`[A-Za-z0-9._-]`), so that they survive any file system and tool.
pub(crate) fn validate_name(name: &str, topic: bool) -> Result<(), Error> {
    let max = if topic {
        MAX_TOPIC_NAME
    } else {
        MAX_GROUP_NAME
    };
    let ok = !name.is_empty()
        && name.len() <= max
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && (!topic
            || name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            name: name.to_owned(),
        })
    }
}

/// The name `<base>.<suffix>` of a scratch directory or file for `base` (a topic being
/// created or deleted), with `base` cut short so the whole fits [`NAME_MAX`] whatever the
/// suffix (a process id and a counter): the suffix makes it unique, the name only says whose
/// it is. Cut at a character boundary.
pub(crate) fn scratch_name(base: &str, suffix: &str) -> String {
    let room = NAME_MAX.saturating_sub(suffix.len() + 1);
    let mut end = base.len().min(room);
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{suffix}", &base[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_names_fit_a_file_name_and_keep_their_suffix() {
        let longest = "t".repeat(MAX_TOPIC_NAME);
        // The largest pid Linux hands out and the largest counter.
        let suffix = format!("{}.{}", 4_194_304u32, u64::MAX);
        let name = scratch_name(&longest, &suffix);
        assert!(name.len() <= NAME_MAX, "{}", name.len());
        assert!(name.ends_with(&format!(".{suffix}")));
        assert_eq!(scratch_name("short", "1.2"), "short.1.2");
        let wide = "é".repeat(200);
        let name = scratch_name(&wide, &suffix);
        assert!(name.len() <= NAME_MAX && name.ends_with(&suffix));
    }

    #[test]
    fn names_are_limited_by_what_their_files_add() {
        assert!(validate_name(&"t".repeat(MAX_TOPIC_NAME), true).is_ok());
        assert!(validate_name(&"t".repeat(MAX_TOPIC_NAME + 1), true).is_err());
        assert!(validate_name(&"g".repeat(MAX_GROUP_NAME), false).is_ok());
        assert!(validate_name(&"g".repeat(MAX_GROUP_NAME + 1), false).is_err());
        assert_eq!(
            format!("{}.offsets.tmp", "g".repeat(MAX_GROUP_NAME)).len(),
            NAME_MAX
        );
    }
}
