//! Kafka's WordCountDemo (`org.apache.kafka.streams.examples.wordcount.WordCountDemo`), ported
//! one for one: lines written without keys (as Kafka's console producer writes them) are
//! lower-cased, split into words as Java's `split("\\W+")` splits, and counted per word.
//!
//! | Kafka Streams | riffle |
//! |---|---|
//! | `builder.<String, String>stream(INPUT)` (null keys) | `builder.stream(INPUT, Consumed::with(Serdes::optional(Serdes::string()), Serdes::string()))` |
//! | `.flatMapValues(v -> Arrays.asList(v.toLowerCase().split("\\W+")))` | `.flat_map_values(\|line\| split_words(&line.to_lowercase()))` |
//! | `.groupBy((key, value) -> value)` | `.group_by(\|_, word\| word.clone(), Grouped::with(..))` |
//! | `.count()` | `.count()` |
//! | `.toStream().to(OUTPUT, Produced.with(Serdes.String(), Serdes.Long()))` | `.to_stream().to(OUTPUT, Produced::with(Serdes::string(), Serdes::i64()))` |

use riffle::{Consumed, Grouped, Produced, Result, Serdes, StreamsBuilder, Topology};

/// The demo's input topic.
pub const INPUT: &str = "streams-plaintext-input";
/// The demo's output topic.
pub const OUTPUT: &str = "streams-wordcount-output";

/// The topology: `INPUT` (lines, null keys) → words → counts per word → `OUTPUT`.
///
/// ```
/// use riffle::{Serdes, StreamsConfig, TopologyTestDriver};
/// use riffle_examples::word_count::{INPUT, OUTPUT, topology};
///
/// let driver = TopologyTestDriver::new(topology()?, StreamsConfig::new("wordcount"))?;
/// let lines = driver.create_input_topic(INPUT, Serdes::optional(Serdes::string()), Serdes::string());
/// let counts = driver.create_output_topic(OUTPUT, Serdes::string(), Serdes::i64());
/// lines.pipe_input_value("Hello Kafka, hello riffle".to_string())?;
/// let counts = counts.read_key_values_to_map()?;
/// assert_eq!(counts["hello"], 2);
/// assert_eq!(counts["riffle"], 1);
/// # Ok::<(), riffle::Error>(())
/// ```
pub fn topology() -> Result<Topology> {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            INPUT,
            Consumed::with(Serdes::optional(Serdes::string()), Serdes::string()),
        )
        .flat_map_values(|line: String| split_words(&line.to_lowercase()))
        .group_by(
            |_, word| word.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count()
        .to_stream()
        .to(OUTPUT, Produced::with(Serdes::string(), Serdes::i64()));
    builder.build()
}

/// Java's `line.split("\\W+")`: the pieces between runs of characters other than ASCII letters,
/// digits and `_`. As in Java, a line that starts with such a run gives an empty first word,
/// empty words at the end are dropped, and a line with no such run is one word (even empty).
pub fn split_words(line: &str) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if line.chars().all(is_word) {
        return vec![line.to_owned()];
    }
    let mut words: Vec<String> = line
        .split(|c: char| !is_word(c))
        .enumerate()
        // A run of separators splits once: drop the empty pieces inside it, keep the first.
        .filter(|(i, w)| *i == 0 || !w.is_empty())
        .map(|(_, w)| w.to_owned())
        .collect();
    while words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

#[cfg(test)]
mod tests {
    use super::split_words;

    /// What Java's `split("\\W+")` returns for these lines (written out by hand).
    #[test]
    fn splits_as_java_does() {
        let cases: [(&str, &[&str]); 7] = [
            ("hello kafka streams", &["hello", "kafka", "streams"]),
            ("  two  spaces ", &["", "two", "spaces"]),
            ("a,b;;c", &["a", "b", "c"]),
            ("", &[""]),
            ("!!!", &[]),
            ("snake_case 42", &["snake_case", "42"]),
            ("café", &["caf"]),
        ];
        for (line, words) in cases {
            assert_eq!(split_words(line), words, "{line:?}");
        }
    }
}
