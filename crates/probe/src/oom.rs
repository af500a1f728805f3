//! Out-of-memory signatures in a command's output.
//!
//! The runtime that failed to allocate says so in its own words; these are the messages of the
//! common ones. A match is recorded with the line (cut to [`MAX_LINE`] characters), so an OOM that
//! a script caught and turned into exit code 0 is still reported.

use serde::{Deserialize, Serialize};

/// The longest line kept.
pub const MAX_LINE: usize = 300;
/// The most matches kept per command.
pub const MAX_MATCHES: usize = 20;

/// `(what is matched, which runtime says it)`. Matching ignores case.
pub const SIGNATURES: [(&str, &str); 12] = [
    ("cuda out of memory", "PyTorch (torch.OutOfMemoryError)"),
    ("outofmemoryerror", "PyTorch"),
    ("cuda error: out of memory", "CUDA runtime (cudaErrorMemoryAllocation)"),
    ("cudaerrormemoryallocation", "CUDA runtime"),
    ("cuda_error_out_of_memory", "CUDA driver API"),
    ("cublas_status_alloc_failed", "cuBLAS"),
    ("cudnn_status_alloc_failed", "cuDNN"),
    ("ncclsystemerror", "NCCL (often a failed allocation)"),
    ("resource_exhausted: out of memory", "JAX / XLA"),
    ("no available memory for the cache blocks", "vLLM (KV cache does not fit)"),
    ("failed to allocate", "llama.cpp / ggml and others"),
    ("out of memory", "generic"),
];

/// One output line that matched a signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomMatch {
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The runtime the signature belongs to.
    pub signature: String,
    pub line: String,
}

/// The first signature `line` matches.
pub fn scan(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    SIGNATURES.iter().find(|(needle, _)| lower.contains(needle)).map(|(_, who)| *who)
}

/// A match for `line`, cut to [`MAX_LINE`] characters.
pub fn matched(stream: &str, line: &str) -> Option<OomMatch> {
    let who = scan(line)?;
    Some(OomMatch {
        stream: stream.to_string(),
        signature: who.to_string(),
        line: line.trim_end().chars().take(MAX_LINE).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_and_vllm_messages_match() {
        let torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
        assert_eq!(scan(torch), Some("PyTorch (torch.OutOfMemoryError)"));
        assert!(scan("ValueError: No available memory for the cache blocks.").is_some());
        assert_eq!(scan("epoch 3 loss 0.25"), None);
        let long = format!("CUDA out of memory {}", "x".repeat(1000));
        assert_eq!(matched("stderr", &long).unwrap().line.chars().count(), MAX_LINE);
    }
}
