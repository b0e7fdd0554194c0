//! [`KStream::print`]: each record printed as a line `[label]: key, value` to standard out or
//! a file (Kafka Streams' `KStream.print`, `Printed` and `PrintForeachAction`), by a
//! `KSTREAM-PRINTER-<n>` processor. The label is the printing stream's node name unless
//! given; the text after `: ` is `key, value` unless a mapper makes it.

use std::cell::RefCell;
use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use crate::dsl::named::node_name;
use crate::dsl::{KStream, Named};
use crate::processor::node::{Node, NodeRef, ProcessingContext};
use crate::topology::{BuiltNode, Erased, NodeFactory};
use crate::types::error::{Error, Result};

type Mapper<K, V> = Arc<dyn Fn(&K, &V) -> String + Send + Sync>;

/// Where printed lines go: standard out, or a file every task of the application writes
/// (opened once, as Kafka's `Printed.toFile` opens it when called).
#[derive(Clone)]
enum Output {
    StdOut,
    File {
        path: String,
        file: Arc<Mutex<std::fs::File>>,
    },
}

/// How [`KStream::print`] prints (Kafka Streams' `Printed`).
pub struct Printed<K, V> {
    output: Output,
    label: Option<String>,
    name: Option<String>,
    mapper: Mapper<K, V>,
}

impl<K: Display, V: Display> Printed<K, V> {
    /// Prints to standard out (Kafka's `Printed.toSysOut`).
    pub fn to_sys_out() -> Self {
        Printed::at(Output::StdOut)
    }

    /// Prints to the file at `path`, created or truncated now (Kafka's `Printed.toFile`); an
    /// empty path or one that cannot be written is an error.
    pub fn to_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        if shown.trim().is_empty() {
            return Err(Error::Topology("filePath can't be an empty string".into()));
        }
        let file = std::fs::File::create(path).map_err(|e| {
            Error::Topology(format!("Unable to write stream to file at [{shown}] {e}"))
        })?;
        Ok(Printed::at(Output::File {
            path: shown,
            file: Arc::new(Mutex::new(file)),
        }))
    }

    fn at(output: Output) -> Self {
        Printed {
            output,
            label: None,
            name: None,
            mapper: Arc::new(|k, v| format!("{k}, {v}")),
        }
    }
}

impl<K, V> Printed<K, V> {
    /// Prints `[label]: …` instead of the stream's node name (Kafka's `withLabel`).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Prints what `mapper` makes of each record after the label, instead of `key, value`
    /// (Kafka's `withKeyValueMapper`).
    pub fn with_key_value_mapper(
        mut self,
        mapper: impl Fn(&K, &V) -> String + Send + Sync + 'static,
    ) -> Self {
        self.mapper = Arc::new(mapper);
        self
    }

    /// Names the printing processor (Kafka's `Printed.withName`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Prints each record as `printed` says; ends the stream (Kafka's `KStream.print`).
    ///
    /// ```
    /// use riffle::dsl::Printed;
    /// use riffle::{Consumed, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream("in", Consumed::with(Serdes::string(), Serdes::i64()))
    ///     .print(Printed::to_sys_out().with_label("in"));
    /// let text = builder.build().unwrap().describe().to_string();
    /// assert!(text.contains("Processor: KSTREAM-PRINTER-0000000001 (stores: [])"));
    /// ```
    pub fn print(&self, printed: Printed<K, V>) {
        let mut g = self.graph.borrow_mut();
        let label = match printed.label {
            Some(label) => label,
            None => g.nodes[self.node].name.clone(),
        };
        let named = printed.name.map(Named::as_);
        let name = node_name(&mut g, "KSTREAM-PRINTER", named.as_ref());
        let (output, mapper) = (printed.output, printed.mapper);
        let label: Arc<str> = Arc::from(label);
        let factory: NodeFactory = Arc::new(move |ctx| {
            let node: NodeRef<K, V> = Rc::new(RefCell::new(Print {
                name: Arc::from(ctx.name()),
                output: output.clone(),
                label: label.clone(),
                mapper: mapper.clone(),
            }));
            BuiltNode::plain(Box::new(node) as Erased)
        });
        g.add_named_processor::<K, V, K, V>(name, &[self.node], factory);
    }
}

/// Prints each record it takes (Kafka's `KStreamPrint` with a `PrintForeachAction`).
struct Print<K, V> {
    name: Arc<str>,
    output: Output,
    label: Arc<str>,
    mapper: Mapper<K, V>,
}

impl<K, V> Node<K, V> for Print<K, V> {
    fn process(&mut self, _ctx: &mut ProcessingContext<'_>, key: K, value: V) -> Result<()> {
        let line = format!("[{}]: {}\n", self.label, (self.mapper)(&key, &value));
        let written = match &self.output {
            Output::StdOut => std::io::stdout().lock().write_all(line.as_bytes()),
            Output::File { file, .. } => match file.lock() {
                Ok(mut file) => file.write_all(line.as_bytes()),
                Err(poisoned) => poisoned.into_inner().write_all(line.as_bytes()),
            },
        };
        written.map_err(|e| {
            let to = match &self.output {
                Output::StdOut => "standard out".to_owned(),
                Output::File { path, .. } => path.clone(),
            };
            Error::ProcessorContext {
                processor: self.name.to_string(),
                reason: format!("printing to {to} failed: {e}"),
            }
        })
    }
}
