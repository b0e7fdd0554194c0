//! Names that become file names: topics and consumer groups.

use crate::error::Error;

/// Checks that `name` is safe as a single file-name component: not empty, at most 249 bytes,
/// not `.` or `..`, without `/`, `\` or NUL. Topic names are further limited to Kafka's legal
/// characters (`[A-Za-z0-9._-]`), so that they survive any file system and tool.
pub(crate) fn validate_name(name: &str, topic: bool) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 249
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
