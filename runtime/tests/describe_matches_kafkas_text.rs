//! `describe()` of topologies using the operators ported from Kafka Streams (`split`,
//! `repartition`, `to_table`, `print`, `to_dynamic`, `Named`), compared with the text Kafka
//! Streams prints for the same topology, written by hand from Kafka's naming rules
//! (`BranchedKStreamImpl`, `KStreamImpl.createRepartitionedSource`, `NamedInternal`: a named
//! operation still takes a counter value) and its `TopologyDescription` layout: nodes, and
//! each node's successors and predecessors, by sub-tree size then name; the first
//! sub-topology indented by three spaces, the others by two.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use riffle::dsl::{Branched, Printed, Repartitioned};
use riffle::processor::RecordContext;
use riffle::{Consumed, Materialized, Named, Produced, Serdes, StreamsBuilder};

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
