//! `riffle sample enrich` on the embedded log: orders joined with a customers table, totalled
//! per region and window, equal the totals summed from the generated data, with either store
//! and either guarantee; the digest it prints depends on the data only.

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn riffle(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_riffle"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "riffle {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The digest line of a run.
pub fn digest(output: &str) -> String {
    output
        .lines()
        .find(|l| l.starts_with("digest of the totals: "))
        .unwrap_or_else(|| panic!("no digest in {output}"))
        .to_owned()
}

#[test]
fn the_enrich_sample_totals_equal_the_generated_orders_with_both_stores_and_guarantees() {
    let mut digests = Vec::new();
    for (store, guarantee) in [("persistent", "at_least_once"), ("memory", "exactly_once")] {
        let out = riffle(&[
            "sample",
            "enrich",
            "--orders",
            "60000",
            "--customers",
            "3000",
            "--store",
            store,
            "--processing-guarantee",
            guarantee,
        ]);
        assert!(
            out.contains(
                "totals equal the orders summed per region and window from the generated data: yes"
            ),
            "{out}"
        );
        assert!(out.contains("dropped for unknown customers"), "{out}");
        digests.push(digest(&out));
    }
    assert_eq!(
        digests[0], digests[1],
        "the same data gives the same totals"
    );
}
