//! [`Named`]: the name a DSL operation gives its processor (Kafka Streams' `Named`), and the
//! naming rule every operation follows ([`node_name`]).
//!
//! Each operation with a `Named` in Kafka Streams has a `*_named` twin here
//! (`filter_named(predicate, Named::as_("x"))`); options that carry a name in Kafka carry it
//! here too (`Produced::with_name`, `Repartitioned::with_name`, `Printed::with_name`,
//! `Branched::as_`).

use crate::topology::GraphBuilder;

/// The longest name Kafka Streams accepts.
const MAX_NAME_LENGTH: usize = 249;

/// The name of an operation's processor, instead of the generated `KSTREAM-<OP>-<n>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub(crate) name: String,
}

impl Named {
    /// The name `name` (Kafka's `Named.as`): ASCII letters, digits, `.`, `_` and `-`, at most
    /// 249 characters; a name that breaks this rule, or that another node has, fails `build`.
    pub fn as_(name: impl Into<String>) -> Self {
        Named { name: name.into() }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Why `name` is not a valid name, as Kafka's `Named.validate` says.
pub(crate) fn invalid(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("Name is illegal, it can't be empty".to_owned());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Some(format!(
            "Name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, name: {name}"
        ));
    }
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !name.chars().all(legal) {
        return Some(format!(
            "Name \"{name}\" is illegal, it contains a character other than ASCII \
             alphanumerics, '.', '_' and '-'"
        ));
    }
    None
}

/// The name of a new node of an operation whose generated names start with `prefix`: `named`,
/// if given, else `<prefix>-<n>`. The counter moves either way, as in Kafka Streams, so naming
/// one operation does not renumber the rest. A given name that is invalid or taken is an error
/// at `build`.
pub(crate) fn node_name(g: &mut GraphBuilder, prefix: &str, named: Option<&Named>) -> String {
    let generated = g.next_name(prefix);
    let Some(named) = named else {
        return generated;
    };
    check_name(g, &named.name);
    named.name.clone()
}

/// Records an error for `build` if `name` is invalid or another node has it.
pub(crate) fn check_name(g: &mut GraphBuilder, name: &str) {
    if let Some(reason) = invalid(name) {
        g.errors.push(reason);
    } else if g.nodes.iter().any(|n| n.name == name) {
        g.errors.push(format!(
            "a node named {name:?} already exists: give each operation a name of its own"
        ));
    }
}
