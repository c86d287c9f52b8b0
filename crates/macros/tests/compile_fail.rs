//! The attribute's compile errors, pinned: each file in `tests/ui/` must
//! fail to compile with the text of the `.stderr` file beside it. After
//! changing a message, regenerate them with
//! `TRYBUILD=overwrite cargo test -p shmpipe-macros --test compile_fail`
//! and read the new text before committing it.

#[test]
fn compile_fail() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
