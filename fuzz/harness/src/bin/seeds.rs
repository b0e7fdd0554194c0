//! Writes the seed corpora: `seeds <dir>` creates `<dir>/<target>/<seed>` for every seed of
//! `riffle_fuzz_harness::seeds` (a few KiB in all). `fuzz/ci-short.sh` runs it before fuzzing.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "corpus".to_owned()),
    );
    let seeds = riffle_fuzz_harness::seeds::all();
    for (target, name, bytes) in &seeds {
        let d = dir.join(target);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join(format!("seed-{name}")), bytes)?;
    }
    println!("wrote {} seeds under {}", seeds.len(), dir.display());
    Ok(())
}
