//! The wasm-bindgen test runner, built from the workspace's pinned wasm-bindgen-cli library.

fn main() -> anyhow::Result<()> {
    wasm_bindgen_cli::wasm_bindgen_test_runner::run_cli_with_args(std::env::args_os())
}
