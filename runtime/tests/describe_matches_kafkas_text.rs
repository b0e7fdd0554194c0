//! `describe()` of topologies using the operators ported from Kafka Streams (`split`,
//! `repartition`, `to_table`, `print`, `to_dynamic`, `Named`, and every operation that
//! repartitions: groupings, windowed aggregations, grouped tables, cogroups, stream–table and
//! stream–stream joins, with and without `topology.optimization`), compared with the text
//! Kafka Streams prints for the same topology, written by hand from Kafka's naming rules
//! (`BranchedKStreamImpl`, `KStreamImpl.createRepartitionedSource` and `repartitionForJoin`,
//! `GroupedStreamAggregateBuilder`, `KGroupedTableImpl`, `CogroupedStreamAggregateBuilder`,
//! `KStreamImplJoin`, `InternalStreamsBuilder.mergeRepartitionTopics`, `NamedInternal`: a
//! named operation still takes a counter value; an aggregation's store name, then its
//! processor's, then its repartition topic's three nodes') and its `TopologyDescription`
//! layout: nodes, and each node's successors and predecessors, by sub-tree size then name; the
//! first sub-topology indented by three spaces, the others by two.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use riffle::dsl::{Branched, Printed, Repartitioned, StreamJoined};
use riffle::processor::RecordContext;
use riffle::{
    Consumed, Grouped, JoinWindows, Joined, Materialized, Named, Produced, Serdes, StreamsBuilder,
    StreamsConfig, TimeWindows, Topology,
};

fn consumed() -> Consumed<String, i64> {
    Consumed::with(Serdes::string(), Serdes::i64())
}

fn produced() -> Produced<String, i64> {
    Produced::with(Serdes::string(), Serdes::i64())
}

#[test]
fn split_with_named_positional_and_default_branches() {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream("in", consumed())
        .split()
        .branch_with(|_, v| *v < 0, Branched::as_("neg"))
        .branch(|_, v| *v == 0)
        .default_branch();
    branches["KSTREAM-BRANCH-0000000001neg"].to("neg", produced());
    branches["KSTREAM-BRANCH-00000000012"].to("zero", produced());
    branches["KSTREAM-BRANCH-00000000010"].to("pos", produced());
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-BRANCH-0000000001
    Processor: KSTREAM-BRANCH-0000000001 (stores: [])
      --> KSTREAM-BRANCH-00000000010, KSTREAM-BRANCH-00000000012, KSTREAM-BRANCH-0000000001neg
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-BRANCH-00000000010 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- KSTREAM-BRANCH-0000000001
    Processor: KSTREAM-BRANCH-00000000012 (stores: [])
      --> KSTREAM-SINK-0000000006
      <-- KSTREAM-BRANCH-0000000001
    Processor: KSTREAM-BRANCH-0000000001neg (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-BRANCH-0000000001
    Sink: KSTREAM-SINK-0000000005 (topic: neg)
      <-- KSTREAM-BRANCH-0000000001neg
    Sink: KSTREAM-SINK-0000000006 (topic: zero)
      <-- KSTREAM-BRANCH-00000000012
    Sink: KSTREAM-SINK-0000000007 (topic: pos)
      <-- KSTREAM-BRANCH-00000000010

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

#[test]
fn a_named_split_and_a_merge_of_its_branches() {
    let builder = StreamsBuilder::new();
    let branches = builder
        .stream("in", consumed())
        .split_named(Named::as_("by-sign-"))
        .branch_with(|_, v| *v < 0, Branched::as_("neg"))
        .no_default_branch();
    let negative = &branches["by-sign-neg"];
    negative
        .merge_named(
            &negative.map_values_named(|v| -v, Named::as_("abs")),
            Named::as_("both"),
        )
        .to("out", produced().with_name("write"));
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> by-sign-
    Processor: by-sign- (stores: [])
      --> by-sign-neg
      <-- KSTREAM-SOURCE-0000000000
    Processor: by-sign-neg (stores: [])
      --> abs, both
      <-- by-sign-
    Processor: abs (stores: [])
      --> both
      <-- by-sign-neg
    Processor: both (stores: [])
      --> write
      <-- by-sign-neg, abs
    Sink: write (topic: out)
      <-- both

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

#[test]
fn repartition_unnamed_then_named() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", consumed())
        .repartition_with(Repartitioned::with(Serdes::string(), Serdes::i64()))
        .filter(|_, v| *v > 0)
        .repartition_with(
            Repartitioned::with(Serdes::string(), Serdes::i64())
                .with_name("again")
                .with_number_of_partitions(3)
                .with_stream_partitioner(|_: &str, _: &String, _: Option<&i64>, _: u32| None),
        )
        .to("out", produced());
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-FILTER-0000000003
    Processor: KSTREAM-FILTER-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Sink: KSTREAM-SINK-0000000002 (topic: KSTREAM-REPARTITION-0000000001-repartition)
      <-- KSTREAM-FILTER-0000000003

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000004 (topics: [KSTREAM-REPARTITION-0000000001-repartition])
      --> KSTREAM-FILTER-0000000005
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> again-repartition-filter
      <-- KSTREAM-SOURCE-0000000004
    Processor: again-repartition-filter (stores: [])
      --> again-repartition-sink
      <-- KSTREAM-FILTER-0000000005
    Sink: again-repartition-sink (topic: again-repartition)
      <-- again-repartition-filter

  Sub-topology: 2
    Source: again-repartition-source (topics: [again-repartition])
      --> KSTREAM-SINK-0000000009
    Sink: KSTREAM-SINK-0000000009 (topic: out)
      <-- again-repartition-source

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

#[test]
fn to_table_after_a_key_change_goes_through_a_repartition_topic_named_after_it() {
    let builder = StreamsBuilder::new();
    builder
        .stream("in", consumed())
        .select_key(|_, v| v.to_string())
        .to_table_with(
            Serdes::string(),
            Serdes::i64(),
            Materialized::named("by-value"),
        )
        .to_stream()
        .to("out", produced());
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> KSTREAM-FILTER-0000000004
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000003
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: KSTREAM-SINK-0000000003 (topic: KSTREAM-TOTABLE-0000000002-repartition)
      <-- KSTREAM-FILTER-0000000004

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000005 (topics: [KSTREAM-TOTABLE-0000000002-repartition])
      --> KSTREAM-TOTABLE-0000000002
    Processor: KSTREAM-TOTABLE-0000000002 (stores: [by-value])
      --> KTABLE-TOSTREAM-0000000006
      <-- KSTREAM-SOURCE-0000000005
    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- KSTREAM-TOTABLE-0000000002
    Sink: KSTREAM-SINK-0000000007 (topic: out)
      <-- KTABLE-TOSTREAM-0000000006

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

fn route(_: &String, value: Option<&i64>, _: &RecordContext<'_>) -> String {
    format!("out-{}", value.map_or(0, |v| v % 2))
}

#[test]
fn to_table_print_and_a_dynamic_sink() {
    let builder = StreamsBuilder::new();
    let changes = builder
        .stream("in", consumed())
        .to_table_with(
            Serdes::string(),
            Serdes::i64(),
            Materialized::named("latest"),
        )
        .to_stream_named(Named::as_("changes"));
    changes.print(Printed::to_sys_out().with_label("changes"));
    changes.to_dynamic(route, produced().with_name("route"));
    // Kafka prints the extractor's `toString`; riffle prints its Rust type's name.
    let expected = format!(
        "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-TOTABLE-0000000001
    Processor: KSTREAM-TOTABLE-0000000001 (stores: [latest])
      --> changes
      <-- KSTREAM-SOURCE-0000000000
    Processor: changes (stores: [])
      --> KSTREAM-PRINTER-0000000003, route
      <-- KSTREAM-TOTABLE-0000000001
    Processor: KSTREAM-PRINTER-0000000003 (stores: [])
      --> none
      <-- changes
    Sink: route (extractor class: {})
      <-- changes

",
        std::any::type_name_of_val(&route)
    );
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

/// Kafka's WordCountDemo (its `examples` module's word count): lines with null keys,
/// split into words, grouped by word, counted. `groupBy` names its key selector
/// `KSTREAM-KEY-SELECT`; `count()` takes its store name, then its processor's, then the
/// repartition topic's sink, filter and source (the topic is named after the store, whose
/// generated name gives the nodes generated names).
fn word_count() -> StreamsBuilder {
    let builder = StreamsBuilder::new();
    builder
        .stream(
            "streams-plaintext-input",
            Consumed::with(Serdes::optional(Serdes::string()), Serdes::string()),
        )
        .flat_map_values(|line: String| {
            line.to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .group_by(
            |_, word| word.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count()
        .to_stream()
        .to(
            "streams-wordcount-output",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    builder
}

fn optimized(builder: StreamsBuilder, optimization: &str) -> Topology {
    let mut config = StreamsConfig::new("describe");
    config
        .set("topology.optimization", optimization)
        .expect("a valid optimization");
    builder.build_with(&config).unwrap()
}

#[test]
fn kafkas_word_count_demo() {
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> KSTREAM-FILTER-0000000006
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FILTER-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: KSTREAM-SINK-0000000005 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition)
      <-- KSTREAM-FILTER-0000000006

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000007 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition])
      --> KSTREAM-AGGREGATE-0000000004
    Processor: KSTREAM-AGGREGATE-0000000004 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> KTABLE-TOSTREAM-0000000008
      <-- KSTREAM-SOURCE-0000000007
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KSTREAM-AGGREGATE-0000000004
    Sink: KSTREAM-SINK-0000000009 (topic: streams-wordcount-output)
      <-- KTABLE-TOSTREAM-0000000008

";
    assert_eq!(
        word_count().build().unwrap().describe().to_string(),
        expected
    );
    // `none` is `build()`.
    let none = optimized(word_count(), "none").describe().to_string();
    assert_eq!(none, expected);
}

/// With `merge.repartition.topics`, Kafka replaces every optimizable repartition topic of a
/// key-changing operation, even a lone one, with one built after the optimization: named after
/// the first topic (`<topic>-filter`, `-sink`, `-source`), the topic's name unchanged.
#[test]
fn kafkas_word_count_demo_optimized() {
    let topic = "KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition";
    let expected = format!(
        "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [streams-plaintext-input])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> {topic}-filter
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: {topic}-filter (stores: [])
      --> {topic}-sink
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: {topic}-sink (topic: {topic})
      <-- {topic}-filter

  Sub-topology: 1
    Source: {topic}-source (topics: [{topic}])
      --> KSTREAM-AGGREGATE-0000000004
    Processor: KSTREAM-AGGREGATE-0000000004 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> KTABLE-TOSTREAM-0000000008
      <-- {topic}-source
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KSTREAM-AGGREGATE-0000000004
    Sink: KSTREAM-SINK-0000000009 (topic: streams-wordcount-output)
      <-- KTABLE-TOSTREAM-0000000008

"
    );
    for optimization in ["all", "merge.repartition.topics"] {
        let text = optimized(word_count(), optimization).describe().to_string();
        assert_eq!(text, expected, "{optimization}");
    }
    // Reusing source topics changes no node.
    let reuse = optimized(word_count(), "reuse.ktable.source.topics");
    assert_eq!(
        reuse.describe().to_string(),
        word_count().build().unwrap().describe().to_string()
    );
}

#[test]
fn group_by_key_after_select_key_into_a_windowed_count() {
    let builder = StreamsBuilder::new();
    let minute = Duration::from_secs(60);
    builder
        .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
        .select_key(|_, page| page.clone())
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::string()))
        .windowed_by(TimeWindows::of_size_with_no_grace(minute))
        .count()
        .to_stream()
        .to(
            "clicks-per-minute",
            Produced::with(
                Serdes::time_windowed(Serdes::string(), minute),
                Serdes::i64(),
            ),
        );
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> KSTREAM-FILTER-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition)
      <-- KSTREAM-FILTER-0000000005

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: clicks-per-minute)
      <-- KTABLE-TOSTREAM-0000000007

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

/// `count_with` of an unnamed store takes one more counter value than `count` (Kafka's
/// `count(Materialized)` keeps burning the name it once used), a windowed `reduce` is
/// `KSTREAM-REDUCE-…` with its store `KSTREAM-REDUCE-STATE-STORE-…`, and a named grouping
/// names its selector and its topic's nodes after itself; its two aggregations read one
/// repartition topic, the second one still taking the topic's three counter values.
#[test]
fn a_named_grouping_aggregated_twice_reads_one_topic() {
    let builder = StreamsBuilder::new();
    let minute = Duration::from_secs(60);
    let grouped = builder
        .stream("views", Consumed::with(Serdes::string(), Serdes::string()))
        .group_by(
            |_, page| page.clone(),
            Grouped::with(Serdes::string(), Serdes::string()).named("by-page"),
        );
    grouped
        .count_with(Materialized::new())
        .to_stream()
        .to("counts", Produced::with(Serdes::string(), Serdes::i64()));
    grouped
        .windowed_by(TimeWindows::of_size_with_no_grace(minute))
        .reduce(
            |a, b| if b.len() > a.len() { b } else { a },
            Materialized::new(),
        )
        .to_stream()
        .to(
            "longest",
            Produced::with(
                Serdes::time_windowed(Serdes::string(), minute),
                Serdes::string(),
            ),
        );
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [views])
      --> by-page
    Processor: by-page (stores: [])
      --> by-page-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: by-page-repartition-filter (stores: [])
      --> by-page-repartition-sink
      <-- by-page
    Sink: by-page-repartition-sink (topic: by-page-repartition)
      <-- by-page-repartition-filter

  Sub-topology: 1
    Source: by-page-repartition-source (topics: [by-page-repartition])
      --> KSTREAM-AGGREGATE-0000000004, KSTREAM-REDUCE-0000000011
    Processor: KSTREAM-AGGREGATE-0000000004 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000003])
      --> KTABLE-TOSTREAM-0000000008
      <-- by-page-repartition-source
    Processor: KSTREAM-REDUCE-0000000011 (stores: [KSTREAM-REDUCE-STATE-STORE-0000000010])
      --> KTABLE-TOSTREAM-0000000015
      <-- by-page-repartition-source
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KSTREAM-AGGREGATE-0000000004
    Processor: KTABLE-TOSTREAM-0000000015 (stores: [])
      --> KSTREAM-SINK-0000000016
      <-- KSTREAM-REDUCE-0000000011
    Sink: KSTREAM-SINK-0000000009 (topic: counts)
      <-- KTABLE-TOSTREAM-0000000008
    Sink: KSTREAM-SINK-0000000016 (topic: longest)
      <-- KTABLE-TOSTREAM-0000000015

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

/// A stream–table join after a key change (`join_with` and `Joined`): the stream goes through
/// the repartition topic named after the node it comes out of (Kafka's `repartitionForJoin`),
/// and the join reads the table's store in the table's sub-topology, which is numbered first
/// (its source was added first).
#[test]
fn a_stream_table_join_after_a_key_change() {
    let builder = StreamsBuilder::new();
    let users = builder.table(
        "users",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::named("users-store"),
    );
    builder
        .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
        .select_key(|_, user| user.clone())
        .join_with(
            &users,
            |user, page, region| format!("{user}@{region}:{page}"),
            Joined::with(Serdes::string(), Serdes::string()),
        )
        .to(
            "enriched",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-KEY-SELECT-0000000003-repartition])
      --> KSTREAM-JOIN-0000000007
    Processor: KSTREAM-JOIN-0000000007 (stores: [users-store])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-SOURCE-0000000006
    Source: KSTREAM-SOURCE-0000000000 (topics: [users])
      --> KTABLE-SOURCE-0000000001
    Sink: KSTREAM-SINK-0000000008 (topic: enriched)
      <-- KSTREAM-JOIN-0000000007
    Processor: KTABLE-SOURCE-0000000001 (stores: [users-store])
      --> none
      <-- KSTREAM-SOURCE-0000000000

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [clicks])
      --> KSTREAM-KEY-SELECT-0000000003
    Processor: KSTREAM-KEY-SELECT-0000000003 (stores: [])
      --> KSTREAM-FILTER-0000000005
      <-- KSTREAM-SOURCE-0000000002
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-KEY-SELECT-0000000003
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-KEY-SELECT-0000000003-repartition)
      <-- KSTREAM-FILTER-0000000005

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

/// A named `Joined` names the join's processor and its repartition topic, whose nodes are then
/// named after the topic. (Names compare as Java compares them: `K` before `b`.)
#[test]
fn a_named_stream_table_left_join_after_a_key_change() {
    let builder = StreamsBuilder::new();
    let users = builder.table(
        "users",
        Consumed::with(Serdes::string(), Serdes::string()),
        Materialized::named("users-store"),
    );
    builder
        .stream("clicks", Consumed::with(Serdes::string(), Serdes::string()))
        .map(|_, page: String| (page.clone(), page))
        .left_join_with(
            &users,
            |_, page, region: Option<String>| format!("{page}@{}", region.unwrap_or_default()),
            Joined::with(Serdes::string(), Serdes::string()).named("by-user"),
        )
        .to(
            "enriched",
            Produced::with(Serdes::string(), Serdes::string()),
        );
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: by-user-repartition-source (topics: [by-user-repartition])
      --> by-user
    Source: KSTREAM-SOURCE-0000000000 (topics: [users])
      --> KTABLE-SOURCE-0000000001
    Processor: by-user (stores: [users-store])
      --> KSTREAM-SINK-0000000008
      <-- by-user-repartition-source
    Sink: KSTREAM-SINK-0000000008 (topic: enriched)
      <-- by-user
    Processor: KTABLE-SOURCE-0000000001 (stores: [users-store])
      --> none
      <-- KSTREAM-SOURCE-0000000000

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [clicks])
      --> KSTREAM-MAP-0000000003
    Processor: KSTREAM-MAP-0000000003 (stores: [])
      --> by-user-repartition-filter
      <-- KSTREAM-SOURCE-0000000002
    Processor: by-user-repartition-filter (stores: [])
      --> by-user-repartition-sink
      <-- KSTREAM-MAP-0000000003
    Sink: by-user-repartition-sink (topic: by-user-repartition)
      <-- by-user-repartition-filter

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

/// A grouped table's count (`KTable.groupBy` then `count`): the table's store is named after
/// its topic; `KTABLE-SELECT` maps each update to its group; the aggregation takes its store
/// name, then the repartition topic's sink and source (Kafka's `KGroupedTableImpl`, no filter
/// node), then its processor's name.
#[test]
fn a_grouped_tables_count() {
    let builder = StreamsBuilder::new();
    builder
        .table(
            "user-regions",
            Consumed::with(Serdes::string(), Serdes::string()),
            Materialized::new(),
        )
        .group_by(
            |user, region| (region, user),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count()
        .to_stream()
        .to(
            "users-per-region",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    let expected = "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000001 (topics: [user-regions])
      --> KTABLE-SOURCE-0000000002
    Processor: KTABLE-SOURCE-0000000002 (stores: [user-regions-STATE-STORE-0000000000])
      --> KTABLE-SELECT-0000000003
      <-- KSTREAM-SOURCE-0000000001
    Processor: KTABLE-SELECT-0000000003 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KTABLE-SOURCE-0000000002
    Sink: KSTREAM-SINK-0000000005 (topic: KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition)
      <-- KTABLE-SELECT-0000000003

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000006 (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition])
      --> KTABLE-AGGREGATE-0000000007
    Processor: KTABLE-AGGREGATE-0000000007 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000004])
      --> KTABLE-TOSTREAM-0000000008
      <-- KSTREAM-SOURCE-0000000006
    Processor: KTABLE-TOSTREAM-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000009
      <-- KTABLE-AGGREGATE-0000000007
    Sink: KSTREAM-SINK-0000000009 (topic: users-per-region)
      <-- KTABLE-TOSTREAM-0000000008

";
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
    // A grouped table's repartition topic is not one `merge.repartition.topics` merges.
    let builder_all = StreamsBuilder::new();
    builder_all
        .table(
            "user-regions",
            Consumed::with(Serdes::string(), Serdes::string()),
            Materialized::new(),
        )
        .group_by(
            |user, region| (region, user),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count()
        .to_stream()
        .to(
            "users-per-region",
            Produced::with(Serdes::string(), Serdes::i64()),
        );
    assert_eq!(
        optimized(builder_all, "all").describe().to_string(),
        expected
    );
}

/// A cogroup of three streams, the third re-keyed: the store's name first, then every
/// re-keyed input's repartition topic (named after the store, whose name does not start with
/// `KSTREAM`, so its nodes are `<topic>-sink`, `-filter`, `-source`), then one aggregation node
/// per input, then the merge (Kafka's `CogroupedStreamAggregateBuilder`).
#[test]
fn a_cogroup_of_three_streams_one_rekeyed() {
    let builder = StreamsBuilder::new();
    let consumed = || Consumed::with(Serdes::string(), Serdes::i64());
    let a = builder.stream("a", consumed()).group_by_key();
    let b = builder.stream("b", consumed()).group_by_key();
    let c = builder
        .stream("c", consumed())
        .select_key(|k, _| k.to_uppercase())
        .group_by_key_with(Grouped::with(Serdes::string(), Serdes::i64()));
    a.cogroup(|_, v, sum: i64| sum + v)
        .cogroup(&b, |_, v, sum| sum - v)
        .cogroup(&c, |_, v, sum| sum + 2 * v)
        .aggregate(|| 0, Materialized::new(), Serdes::i64())
        .to_stream()
        .to("totals", produced());
    let store = "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000004";
    let expected = format!(
        "\
Topologies:
   Sub-topology: 0
    Source: {store}-repartition-source (topics: [{store}-repartition])
      --> COGROUPKSTREAM-AGGREGATE-0000000010
    Source: KSTREAM-SOURCE-0000000000 (topics: [a])
      --> COGROUPKSTREAM-AGGREGATE-0000000008
    Source: KSTREAM-SOURCE-0000000001 (topics: [b])
      --> COGROUPKSTREAM-AGGREGATE-0000000009
    Processor: COGROUPKSTREAM-AGGREGATE-0000000008 (stores: [{store}])
      --> COGROUPKSTREAM-MERGE-0000000011
      <-- KSTREAM-SOURCE-0000000000
    Processor: COGROUPKSTREAM-AGGREGATE-0000000009 (stores: [{store}])
      --> COGROUPKSTREAM-MERGE-0000000011
      <-- KSTREAM-SOURCE-0000000001
    Processor: COGROUPKSTREAM-AGGREGATE-0000000010 (stores: [{store}])
      --> COGROUPKSTREAM-MERGE-0000000011
      <-- {store}-repartition-source
    Processor: COGROUPKSTREAM-MERGE-0000000011 (stores: [])
      --> KTABLE-TOSTREAM-0000000012
      <-- COGROUPKSTREAM-AGGREGATE-0000000008, COGROUPKSTREAM-AGGREGATE-0000000009, COGROUPKSTREAM-AGGREGATE-0000000010
    Processor: KTABLE-TOSTREAM-0000000012 (stores: [])
      --> KSTREAM-SINK-0000000013
      <-- COGROUPKSTREAM-MERGE-0000000011
    Sink: KSTREAM-SINK-0000000013 (topic: totals)
      <-- KTABLE-TOSTREAM-0000000012

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [c])
      --> KSTREAM-KEY-SELECT-0000000003
    Processor: KSTREAM-KEY-SELECT-0000000003 (stores: [])
      --> {store}-repartition-filter
      <-- KSTREAM-SOURCE-0000000002
    Processor: {store}-repartition-filter (stores: [])
      --> {store}-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000003
    Sink: {store}-repartition-sink (topic: {store}-repartition)
      <-- {store}-repartition-filter

"
    );
    assert_eq!(builder.build().unwrap().describe().to_string(), expected);
}

fn stream_stream_join(joined: StreamJoined<String, i64, i64>) -> StreamsBuilder {
    let builder = StreamsBuilder::new();
    let left = builder
        .stream("left", consumed())
        .select_key(|k, _| k.to_uppercase());
    let right = builder
        .stream("right", consumed())
        .map(|k: String, v: i64| (k.to_uppercase(), v));
    left.join_stream(
        &right,
        |l, r| l + r,
        JoinWindows::of_time_difference_without_grace(Duration::from_secs(5)),
        joined,
    )
    .to("joined", produced());
    builder
}

/// The sub-topologies of `text`, each with its header line.
fn subtopologies(text: &str) -> Vec<String> {
    let body = text.strip_prefix("Topologies:\n").expect("a description");
    let mut subs: Vec<String> = Vec::new();
    for line in body.lines() {
        if line.trim_start().starts_with("Sub-topology:") {
            subs.push(String::new());
        }
        if let Some(last) = subs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    subs
}

/// The names of the nodes `text` (one sub-topology) lists, in its order.
fn node_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            ["Source: ", "Processor: ", "Sink: "]
                .iter()
                .find_map(|kind| l.strip_prefix(kind))
                .map(|rest| rest.split(' ').next().unwrap_or_default().to_owned())
        })
        .collect()
}

/// A stream–stream join of two re-keyed streams: each side's repartition topic is named after
/// the node the side comes out of (or `<name>-left` and `<name>-right` for a named join), in
/// Kafka's order; the join then takes two `KSTREAM-WINDOWED` counter values, its two
/// processors', and the merge's. riffle's join has no `KSTREAM-WINDOWED` nodes (its join nodes
/// put each side's records into its store themselves, and each is connected to both stores),
/// so the join's own sub-topology is compared by its nodes' names, the `KSTREAM-WINDOWED`
/// nodes left out; the sub-topologies writing the repartition topics are compared whole.
#[test]
fn a_stream_stream_join_of_two_rekeyed_streams() {
    let joined = || StreamJoined::with(Serdes::string(), Serdes::i64(), Serdes::i64());
    let text = stream_stream_join(joined())
        .build()
        .unwrap()
        .describe()
        .to_string();
    let subs = subtopologies(&text);
    assert_eq!(subs.len(), 3, "{text}");
    assert_eq!(
        subs[0],
        "   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [left])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> KSTREAM-FILTER-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-FILTER-0000000005 (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-KEY-SELECT-0000000001-repartition)
      <-- KSTREAM-FILTER-0000000005

"
    );
    assert_eq!(
        subs[1],
        "  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000002 (topics: [right])
      --> KSTREAM-MAP-0000000003
    Processor: KSTREAM-MAP-0000000003 (stores: [])
      --> KSTREAM-FILTER-0000000008
      <-- KSTREAM-SOURCE-0000000002
    Processor: KSTREAM-FILTER-0000000008 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- KSTREAM-MAP-0000000003
    Sink: KSTREAM-SINK-0000000007 (topic: KSTREAM-MAP-0000000003-repartition)
      <-- KSTREAM-FILTER-0000000008

"
    );
    // Kafka's sub-topology 2, but for KSTREAM-WINDOWED-0000000010 and -0000000011.
    let mut names = node_names(&subs[2]);
    names.sort();
    assert_eq!(
        names,
        [
            "KSTREAM-JOINOTHER-0000000013",
            "KSTREAM-JOINTHIS-0000000012",
            "KSTREAM-MERGE-0000000014",
            "KSTREAM-SINK-0000000015",
            "KSTREAM-SOURCE-0000000006",
            "KSTREAM-SOURCE-0000000009",
        ]
    );
    assert!(
        subs[2].contains("Source: KSTREAM-SOURCE-0000000006 (topics: [KSTREAM-KEY-SELECT-0000000001-repartition])")
            && subs[2].contains("Source: KSTREAM-SOURCE-0000000009 (topics: [KSTREAM-MAP-0000000003-repartition])")
            && subs[2].contains("KSTREAM-JOINTHIS-0000000012-store")
            && subs[2].contains("KSTREAM-JOINOTHER-0000000013-store")
            && subs[2].contains("Sink: KSTREAM-SINK-0000000015 (topic: joined)"),
        "{}",
        subs[2]
    );

    // Named: `<name>-left-repartition`, `<name>-right-repartition`, and the processors
    // `<name>-this-join`, `<name>-other-join`, `<name>-merge`.
    let text = stream_stream_join(joined().with_name("pair"))
        .build()
        .unwrap()
        .describe()
        .to_string();
    let subs = subtopologies(&text);
    assert_eq!(
        subs[0],
        "   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [left])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> pair-left-repartition-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: pair-left-repartition-filter (stores: [])
      --> pair-left-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: pair-left-repartition-sink (topic: pair-left-repartition)
      <-- pair-left-repartition-filter

"
    );
    assert!(subs[1].contains("Sink: pair-right-repartition-sink (topic: pair-right-repartition)"));
    let mut names = node_names(&subs[2]);
    names.sort();
    assert_eq!(
        names,
        [
            "KSTREAM-SINK-0000000015",
            "pair-left-repartition-source",
            "pair-merge",
            "pair-other-join",
            "pair-right-repartition-source",
            "pair-this-join",
        ]
    );
    assert!(subs[2].contains("KSTREAM-JOINTHIS-0000000012-store"));
}

/// Two aggregations after one key change, unnamed, each with its own repartition topic
/// (named after its store) under `none`; under `merge.repartition.topics` one topic, named
/// after the first, read by both, and the filter between the key change and the second
/// aggregation's topic moved below it (Kafka's `mergeRepartitionTopics`).
#[test]
fn two_groupings_of_one_key_change_with_and_without_merging() {
    let build = || {
        let builder = StreamsBuilder::new();
        let rekeyed = builder
            .stream("in", consumed())
            .select_key(|_, v| v.to_string());
        rekeyed
            .group_by_key_with(Grouped::with(Serdes::string(), Serdes::i64()))
            .count()
            .to_stream()
            .to("counts", produced());
        rekeyed
            .filter(|_, v| *v > 0)
            .group_by_key_with(Grouped::with(Serdes::string(), Serdes::i64()))
            .reduce(|a, b| a + b, Materialized::named("sums"))
            .to_stream()
            .to("sums", produced());
        builder
    };
    let first = "KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition";
    let unoptimized = build().build().unwrap().describe().to_string();
    let subs = subtopologies(&unoptimized);
    assert_eq!(subs.len(), 3, "{unoptimized}");
    assert!(
        subs[0].contains(&format!("Sink: KSTREAM-SINK-0000000004 (topic: {first})"))
            && subs[0].contains("Sink: sums-repartition-sink (topic: sums-repartition)"),
        "{unoptimized}"
    );
    let expected = format!(
        "\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [in])
      --> KSTREAM-KEY-SELECT-0000000001
    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
      --> {first}-filter
      <-- KSTREAM-SOURCE-0000000000
    Processor: {first}-filter (stores: [])
      --> {first}-sink
      <-- KSTREAM-KEY-SELECT-0000000001
    Sink: {first}-sink (topic: {first})
      <-- {first}-filter

  Sub-topology: 1
    Source: {first}-source (topics: [{first}])
      --> KSTREAM-FILTER-0000000009, KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-FILTER-0000000009 (stores: [])
      --> KSTREAM-REDUCE-0000000010
      <-- {first}-source
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])
      --> KTABLE-TOSTREAM-0000000007
      <-- {first}-source
    Processor: KSTREAM-REDUCE-0000000010 (stores: [sums])
      --> KTABLE-TOSTREAM-0000000014
      <-- KSTREAM-FILTER-0000000009
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Processor: KTABLE-TOSTREAM-0000000014 (stores: [])
      --> KSTREAM-SINK-0000000015
      <-- KSTREAM-REDUCE-0000000010
    Sink: KSTREAM-SINK-0000000008 (topic: counts)
      <-- KTABLE-TOSTREAM-0000000007
    Sink: KSTREAM-SINK-0000000015 (topic: sums)
      <-- KTABLE-TOSTREAM-0000000014

"
    );
    assert_eq!(optimized(build(), "all").describe().to_string(), expected);
}
