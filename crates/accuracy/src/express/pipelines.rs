//! The diffusion pipelines the harness declares: for each, its models (declared with sourced
//! parameter counts in `models.vram`), its fixed settings (architecture, hidden size, text
//! tokens, guidance) from the model's own configuration and the diffusers pipeline's defaults,
//! and the wordings that name it ([`pipeline`]).

use crate::gaps::{Gap, feature};

/// A text encoder of a pipeline, by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Encoder {
    ClipL,
    ClipG,
    /// OpenCLIP ViT-H/14's text tower (Stable Diffusion 2.x).
    ClipH,
    T5,
    /// umT5-XXL's encoder (Wan 2.1).
    UmT5,
    /// LLaVA-Llama-3-8B's decoder without its head (HunyuanVideo's `text_encoder`).
    LlavaLlama3,
    /// Qwen2.5-VL-7B, vision tower and head included (Qwen-Image's `text_encoder`).
    QwenVl,
    /// Gemma 2 2B's decoder without its head (Sana's `text_encoder`, `Gemma2Model`).
    Gemma2,
}

impl Encoder {
    pub(super) fn model(self) -> &'static str {
        match self {
            Encoder::ClipL => "clip-l-text",
            Encoder::ClipG => "clip-g-text",
            Encoder::ClipH => "openclip-h-text",
            Encoder::T5 => "t5-xxl-encoder",
            Encoder::UmT5 => "umt5-xxl-encoder",
            Encoder::LlavaLlama3 => "llava-llama3-8b-text",
            Encoder::QwenVl => "qwen2.5-vl-7b-text",
            Encoder::Gemma2 => "gemma2-2b-text",
        }
    }
}

/// The fixed settings of a pipeline.
pub(super) struct Pipeline {
    pub(super) denoiser: &'static str,
    pub(super) encoders: &'static [Encoder],
    pub(super) vae: &'static str,
    pub(super) hidden: u64,
    pub(super) text_tokens: u64,
    /// Where the text token count comes from.
    pub(super) tokens_note: &'static str,
    /// `true` (one doubled batch), `false`, or `separate` (two passes).
    pub(super) cfg: &'static str,
    /// `rope fp32` where the transformer rotates 16-bit queries and keys in fp32, with the code
    /// that does it.
    pub(super) rope_fp32: Option<&'static str>,
    /// A UNet's structure lines (levels, attention, context width); `None` for a transformer.
    pub(super) unet: Option<&'static str>,
    /// Where the pipeline casts a 16-bit VAE to fp32 for the decode, the code that does it.
    pub(super) vae_upcast: Option<&'static str>,
    /// A video pipeline's defaults: the frames it generates and its size, where the point does
    /// not restate them.
    pub(super) video: Option<VideoDefaults>,
    /// Lines of the denoiser and VAE the pipeline states beyond the generic ones (an MLP
    /// width, a video decoder, the VAE's base channels).
    pub(super) extra: &'static str,
    /// Where the pipeline's documented use loads its VAE in fp32 beside 16-bit models.
    pub(super) vae_fp32: Option<&'static str>,
    /// An image pipeline's default square side where the point states no size
    /// (`default_sample_size` × the VAE's factor), and where that comes from.
    pub(super) side: Option<(u64, &'static str)>,
    /// Where a guidance-distilled checkpoint's documents run it with `guidance_scale` 0.0, so
    /// the pipeline's unconditional batch is off unless the point states a scale.
    pub(super) guidance_off: Option<&'static str>,
}

/// A text-to-video pipeline's `__call__` defaults and its causal VAE's tile.
pub(super) struct VideoDefaults {
    pub(super) frames: u64,
    pub(super) width: u64,
    pub(super) height: u64,
    /// Where the default size comes from, and the default frames.
    pub(super) size_note: &'static str,
    pub(super) frames_note: &'static str,
    /// The tile `enable_tiling` decodes, width × height.
    pub(super) tile: (u64, u64),
    /// Whether the decoder's caches changed hands in diffusers 0.31 (CogVideoX's did; Wan's
    /// decoder came later, and HunyuanVideo's has none).
    pub(super) caches_by_release: bool,
    /// Where the model's own inference script (not diffusers) tiles the decode by default.
    pub(super) script_tiles: Option<&'static str>,
    /// Sizes the model's own documents name by a word (Wan's "480P", "720P"), width × height.
    pub(super) named_sizes: &'static [(&'static str, (u64, u64))],
    /// Frames to a latent frame (after the first): the VAE's temporal compression.
    pub(super) temporal: u64,
}

/// CogVideoXPipeline (diffusers pipeline_cogvideox.py at 58eb52c): `num_frames` defaults to the
/// transformer's `sample_frames` (49), height and width to its `sample_height` and
/// `sample_width` (60 and 90 latents) times the VAE's spatial factor 8: 720 × 480;
/// `max_sequence_length` 226 T5 tokens; `guidance_scale` 6, so a second (unconditional) batch.
/// AutoencoderKLCogVideoX tiles at half its `sample_height` × `sample_width` (480 × 720):
/// 360 × 240 pixels.
fn cogvideox(denoiser: &'static str, hidden: u64) -> Pipeline {
    Pipeline {
        denoiser,
        encoders: &[Encoder::T5],
        vae: "cogvideox-vae",
        hidden,
        text_tokens: 226,
        tokens_note: "T5 max_sequence_length 226 (CogVideoXPipeline default)",
        cfg: "true",
        // CogVideoX-5b rotates its image tokens' queries and keys in fp32 (apply_rotary_emb in
        // CogVideoXAttnProcessor2_0), but its blocks run the attention before the MLP: counted
        // on diffusers' block, the rotation's moment holds 12.7 × hidden per token, about the
        // sequential block's 4 + 8 at its MLP, not FLUX's single-stream 17 (`rope fp32`).
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: Some(VideoDefaults {
            frames: 49,
            width: 720,
            height: 480,
            size_note: "720 x 480 (CogVideoXPipeline default: the transformer's sample_width \
                        and sample_height, 90 and 60 latents)",
            frames_note: "49 frames (CogVideoXPipeline default: the transformer's sample_frames)",
            tile: (360, 240),
            caches_by_release: true,
            script_tiles: None,
            named_sizes: &[],
            temporal: 4,
        }),
        extra: "",
        vae_fp32: None,
        side: None,
        guidance_off: None,
    }
}

/// CogVideoXPipeline with CogVideoX1.5-5B's transformer: the 5b's blocks (48 heads of 64), patches
/// two latent frames deep (`patch_size_t` 2: `patch_frames 2`, the latent frames padded to a
/// whole patch), and the same VAE. Its transformer config (`sample_frames` 81, `sample_height`
/// 96 and `sample_width` 170 latents, as transcribed for CogVideoX1.5-5B in a public copy, code
/// index id 11998145745) makes the pipeline's defaults 81 frames of 1360 × 768.
fn cogvideox_1_5() -> Pipeline {
    let base = cogvideox("cogvideox1.5-5b-transformer", 3072);
    Pipeline {
        video: Some(VideoDefaults {
            frames: 81,
            width: 1360,
            height: 768,
            size_note: "1360 x 768 (CogVideoXPipeline default: CogVideoX1.5-5B's sample_width \
                        and sample_height, 170 and 96 latents)",
            frames_note: "81 frames (CogVideoXPipeline default: the transformer's sample_frames)",
            ..base.video.expect("CogVideoX pipelines make videos")
        }),
        extra: "    patch_frames  2  # CogVideoX 1.5's patch_size_t\n",
        ..base
    }
}

/// CompVis v1 UNet (configs/stable-diffusion/v1-inference.yaml, diffusers unet/config.json):
/// model_channels 320, channel_mult [1, 2, 4, 4], num_res_blocks 2, attention at the three upper
/// levels, 8 heads, context_dim 768 (CLIP-L).
const SD1_UNET: &str = "    heads         8\n    channel_mult  1 2 4 4\n    layers_per_block 2\n    \
                        cross_attention_dim 768\n";

/// SDXL base 1.0's unet/config.json: block_out_channels 320 640 1280, layers_per_block 2,
/// transformer_layers_per_block 1 2 10 with no attention at the first level, 64-wide heads,
/// cross_attention_dim 2048 (CLIP-L and bigG concatenated); as examples/sdxl-lora.vram.
const SDXL_UNET: &str = "    channel_mult  1 2 4\n    layers_per_block 2\n    \
                         transformer_layers 0 2 10\n    head_dim      64\n    \
                         cross_attention_dim 2048\n";

/// Stable Diffusion 2.x's UNet: stabilityai/stable-diffusion-2-1 unet/config.json as
/// huggingface/candle vendors it (candle-transformers/src/models/stable_diffusion/mod.rs
/// @ 092a3daf349ded60afb506fa04163006babda63a, `StableDiffusionConfig::v2_1`): block_out_channels
/// 320 640 1280 1280, layers_per_block 2, cross-attention at the three upper levels,
/// attention_head_dim 5 10 20 20 (head counts: 64-wide heads), use_linear_projection,
/// cross_attention_dim 1024 (OpenCLIP ViT-H). The SD 1.x layout but for the heads and the
/// context width.
const SD2_UNET: &str = "    channel_mult  1 2 4 4\n    layers_per_block 2\n    \
                        head_dim      64\n    cross_attention_dim 1024\n";

/// WanPipeline (diffusers pipeline_wan.py at 58eb52c): `height` 480, `width` 832, `num_frames`
/// 81 by default, `max_sequence_length` 512 umT5 tokens, `guidance_scale` 5.0 run as a second
/// pass of the transformer (`noise_uncond`), not a doubled batch. The transformer cross-attends
/// to the text; its blocks' MLP is `ffn_dim` wide (Wan2.1 1.3B and 14B transformer/config.json:
/// 12 and 40 heads of 128, `ffn_dim` 8960 and 13824). AutoencoderKLWan (`base_dim` 96) decodes
/// one latent frame at a time; diffusers' Wan examples load it in fp32 beside a bf16 pipeline.
fn wan(denoiser: &'static str, hidden: u64, extra: &'static str) -> Pipeline {
    Pipeline {
        denoiser,
        encoders: &[Encoder::UmT5],
        vae: "wan-vae",
        hidden,
        text_tokens: 512,
        tokens_note: "umT5 max_sequence_length 512 (WanPipeline default)",
        cfg: "separate",
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: Some(VideoDefaults {
            frames: 81,
            width: 832,
            height: 480,
            size_note: "832 x 480 (WanPipeline default)",
            frames_note: "81 frames (WanPipeline default)",
            tile: (256, 256),
            caches_by_release: false,
            script_tiles: None,
            // Wan2.1's README: 480P is 832 × 480, 720P 1280 × 720 (its generate.py SIZE_CONFIGS).
            named_sizes: &[("480p", (832, 480)), ("720p", (1280, 720))],
            temporal: 4,
        }),
        extra,
        vae_fp32: Some(
            "diffusers' Wan examples: AutoencoderKLWan.from_pretrained(..., \
             torch_dtype=torch.float32) beside a bf16 pipeline; WanPipeline decodes in the VAE's \
             dtype",
        ),
        side: None,
        guidance_off: None,
    }
}

/// An LTX-Video release: its transformer (2 B through 0.9.6 and for 0.9.8's 2 B checkpoints, 13 B
/// for 0.9.7 and 0.9.8's 13 B ones) and its VAE, whose decoder changed at 0.9.1 and 0.9.5
/// (diffusers `scripts/convert_ltx_to_diffusers.py` `get_vae_config`: 0.9.7 keeps 0.9.5's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LtxRelease {
    V090,
    V091,
    V095,
    /// 0.9.7's 13 B transformer with 0.9.5's VAE.
    V097,
}

/// LTXPipeline (diffusers `pipeline_ltx.py`): `height` 512, `width` 704, `num_frames` 161,
/// `max_sequence_length` 128 T5 tokens, `guidance_scale` 3 (a second batch). Its VAE compresses
/// 32 × 32 pixels and 8 frames into one latent, which the transformer takes without patching:
/// one token per 32 × 32 pixels of each latent frame (`patch_pixels 32`). Its attention rotates
/// queries and keys in fp32 (`transformer_ltx.py` `apply_rotary_emb`: `x.float() * cos +
/// x_rotated.float() * sin`). The VAE decodes every latent frame in one call (`video_vae ltx`,
/// `ltx-0.9.1` or `ltx-0.9.5`, the release's decoder).
pub(super) fn ltx_video(release: LtxRelease) -> Pipeline {
    // The transformer's tokens and the release's decoder, as `extra` lines.
    macro_rules! lines {
        ($decoder:literal) => {
            concat!(
                "    patch_pixels  32  # LTX-Video's VAE: 32 x 32 pixels per latent, no patching\n",
                "    video_vae     ",
                $decoder,
                "\n"
            )
        };
    }
    let (denoiser, hidden, vae, extra) = match release {
        LtxRelease::V090 => ("ltxv-2b-transformer", 2048, "ltxv-vae-0.9.0", lines!("ltx")),
        LtxRelease::V091 => ("ltxv-2b-transformer", 2048, "ltxv-vae-0.9.1", lines!("ltx-0.9.1")),
        LtxRelease::V095 => ("ltxv-2b-transformer", 2048, "ltxv-vae-0.9.5", lines!("ltx-0.9.5")),
        LtxRelease::V097 => (
            "ltxv-0.9.7-13b-transformer",
            4096,
            "ltxv-vae-0.9.5",
            lines!("ltx-0.9.5  # 0.9.7's VAE is 0.9.5's (get_vae_config)"),
        ),
    };
    Pipeline {
        denoiser,
        encoders: &[Encoder::T5],
        vae,
        hidden,
        text_tokens: 128,
        tokens_note: "T5 max_sequence_length 128 (LTXPipeline default)",
        cfg: "true",
        rope_fp32: Some(
            "diffusers apply_rotary_emb in transformer_ltx.py: x.float() * cos + \
             x_rotated.float() * sin",
        ),
        unet: None,
        vae_upcast: None,
        video: Some(VideoDefaults {
            frames: 161,
            width: 704,
            height: 512,
            size_note: "704 x 512 (LTXPipeline default)",
            frames_note: "161 frames (LTXPipeline default)",
            tile: (512, 512),
            caches_by_release: false,
            script_tiles: None,
            named_sizes: &[],
            temporal: 8,
        }),
        extra,
        vae_fp32: None,
        side: None,
        guidance_off: None,
    }
}

/// A StableDiffusion3Pipeline (SD3 Medium, SD 3.5 Large and Medium): the joint attention sees 77
/// CLIP tokens and 256 T5 tokens (`max_sequence_length` default 256, diffusers
/// pipeline_stable_diffusion_3.py at 58eb52c), `guidance_scale` 7 (a second batch); the same
/// three text encoders and 16-channel autoencoder for all three (the SD 3.5 configs below).
/// `hidden` is the transformer's heads × attention_head_dim (64).
fn sd3(denoiser: &'static str, hidden: u64) -> Pipeline {
    Pipeline {
        denoiser,
        encoders: &[Encoder::T5, Encoder::ClipL, Encoder::ClipG],
        vae: "sd3-vae",
        hidden,
        text_tokens: 333,
        tokens_note: "77 CLIP + 256 T5 tokens (StableDiffusion3Pipeline defaults)",
        cfg: "true",
        // 2D sine-cosine position embeddings added to the patches (PatchEmbed): no rotation.
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: None,
        extra: "",
        vae_fp32: None,
        side: Some((
            1024,
            "1024 x 1024 (StableDiffusion3Pipeline default: the transformer's sample_size 128 x the VAE's factor 8)",
        )),
        guidance_off: None,
    }
}

/// A PixArt pipeline: one T5 encoder, a PixArt XL/2 transformer (hidden 16 heads × 72 = 1152),
/// guidance (`guidance_scale` 4.5, a second batch).
fn pixart(
    denoiser: &'static str,
    vae: &'static str,
    text_tokens: u64,
    tokens_note: &'static str,
) -> Pipeline {
    Pipeline {
        denoiser,
        encoders: &[Encoder::T5],
        vae,
        hidden: 1152,
        text_tokens,
        tokens_note,
        cfg: "true",
        // 2D sine-cosine position embeddings added to the patches (PatchEmbed): no rotation.
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: None,
        extra: "",
        vae_fp32: None,
        side: Some((
            1024,
            "1024 x 1024 (the PixArt pipelines' default: the 1024-MS transformer's sample_size 128 x the VAE's factor 8)",
        )),
        guidance_off: None,
    }
}

/// QwenImagePipeline (diffusers pipeline_qwenimage.py at 58eb52c): `height` and `width`
/// `default_sample_size` 128 × the VAE's 8 = 1024; the prompt's Qwen2.5-VL hidden states after
/// the template's first 34 tokens, a batch padded to its longest prompt (not to
/// `max_sequence_length`); `true_cfg_scale` 4.0 runs a second pass of the transformer when a
/// negative prompt is given, as the model's README and the diffusers examples give one. Its
/// attention rotates queries and keys as complex numbers in fp32 (`apply_rotary_emb_qwen`:
/// `x.float()` viewed as complex). The VAE is Wan 2.1's, decoding the one latent frame.
fn qwen_image() -> Pipeline {
    Pipeline {
        denoiser: "qwen-image-transformer",
        encoders: &[Encoder::QwenVl],
        vae: "qwen-image-vae",
        hidden: 3072,
        text_tokens: 128,
        tokens_note: "a prompt of about 128 tokens (QwenImagePipeline keeps the prompt's own \
                      length after its 34-token template; the source states none)",
        cfg: "separate",
        rope_fp32: Some(
            "diffusers apply_rotary_emb_qwen in QwenDoubleStreamAttnProcessor2_0: x.float() as \
             complex pairs times the frequencies",
        ),
        unet: None,
        vae_upcast: None,
        video: None,
        extra: "    ffn           12288\n    video_vae     wan\n    video_frames  1\n    \
                vae_channels  96\n",
        vae_fp32: None,
        side: Some((
            1024,
            "1024 x 1024 (QwenImagePipeline default: default_sample_size 128 x the VAE's 8)",
        )),
        guidance_off: None,
    }
}

/// HunyuanVideoPipeline (diffusers pipeline_hunyuan_video.py at 58eb52c): `height` 720,
/// `width` 1280, `num_frames` 129 by default, `max_sequence_length` 256 tokens of the LLaVA-Llama-3
/// text encoder's hidden states (the prompt template's first 95 cropped off) beside CLIP-L's
/// pooled output; the transformer is guidance-distilled (`guidance_scale` 6.0 is an embedding)
/// and `true_cfg_scale` 1.0 runs no negative pass. Its blocks are FLUX.1's (3072 wide, MLP
/// 12288), rotating queries and keys in fp32 (diffusers `apply_rotary_emb`). Its causal VAE
/// (`AutoencoderKLHunyuanVideo`) decodes chunks of 5 latent frames every 3, in tiles of 256 ×
/// 256 pixels under `enable_tiling()`.
fn hunyuan_video() -> Pipeline {
    Pipeline {
        denoiser: "hunyuan-video-transformer",
        encoders: &[Encoder::LlavaLlama3, Encoder::ClipL],
        vae: "hunyuan-video-vae",
        hidden: 3072,
        text_tokens: 256,
        tokens_note: "256 LLaVA-Llama-3 tokens (HunyuanVideoPipeline max_sequence_length)",
        cfg: "false",
        rope_fp32: Some(
            "diffusers apply_rotary_emb in HunyuanVideoAttnProcessor2_0: x.float() * cos + \
             x_rotated.float() * sin",
        ),
        unet: None,
        vae_upcast: None,
        video: Some(VideoDefaults {
            frames: 129,
            width: 1280,
            height: 720,
            size_note: "1280 x 720 (HunyuanVideoPipeline default)",
            frames_note: "129 frames (HunyuanVideoPipeline default)",
            tile: (256, 256),
            caches_by_release: false,
            script_tiles: Some(
                "HunyuanVideo's own sample_video.py tiles the VAE decode (hyvideo/config.py: \
                 set_defaults(vae_tiling=True)); its decode is modelled as diffusers' \
                 AutoencoderKLHunyuanVideo with enable_tiling()",
            ),
            // HunyuanVideo's README names its settings 720p (720 × 1280) and 540p (544 × 960).
            named_sizes: &[("720p", (1280, 720)), ("540p", (960, 544)), ("544", (960, 544))],
            temporal: 4,
        }),
        extra: "    ffn           12288\n    video_vae     hunyuan\n",
        vae_fp32: None,
        side: None,
        guidance_off: None,
    }
}

/// SanaPipeline (diffusers `pipeline_sana.py` at 58eb52c): `height` and `width` 1024,
/// `max_sequence_length` 300 Gemma 2 tokens (the complex human instruction is cut off before
/// the transformer), `guidance_scale` 4.5 (a doubled batch). Its transformer
/// (`SanaTransformer2DModel`, `scripts/convert_sana_to_diffusers.py`'s SanaMS configurations)
/// takes the DC-AE's 32 × 32-pixel latents unpatched (`image_vae dc-ae`, `patch_pixels` 32);
/// its MLP is a GLU MBConv whose inverted convolution is 2 × 2.5 × hidden wide, followed by a
/// depthwise convolution of that width: `ffn` is that width, the two tensors a token at the
/// MLP's peak beside the generic count.
fn sana(denoiser: &'static str, hidden: u64, extra: &'static str) -> Pipeline {
    Pipeline {
        denoiser,
        encoders: &[Encoder::Gemma2],
        vae: "sana-dc-ae",
        hidden,
        text_tokens: 300,
        tokens_note: "300 Gemma 2 tokens (SanaPipeline max_sequence_length)",
        cfg: "true",
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: None,
        extra,
        vae_fp32: None,
        side: Some((1024, "1024 x 1024 (SanaPipeline default height and width)")),
        guidance_off: None,
    }
}

/// MochiPipeline (diffusers `pipeline_mochi.py` at 58eb52c): `height` 480, `width` 848,
/// `num_frames` 19 by default, `max_sequence_length` 256 T5 tokens, `guidance_scale` 4.5 run as
/// a doubled batch (`torch.cat([latents] * 2)`). The transformer (`MochiTransformer3DModel`
/// defaults, Mochi 1 preview's: 48 blocks of 24 heads × 128 = 3072, patches of 2 × 2 latents)
/// gives the text its own narrower stream (1536), whose tokens the step counts at the full
/// width. Its MLP is SwiGLU of inner width 8192 (`(4 × 3072 × 2) // 3`): the projection is
/// 16,384 wide, and at the gate's product it holds that projection, the SiLU of its half and
/// the product, 4 × 8192 = 2 × 16,384 values a token, the generic MLP count at `ffn 16384`.
/// Its VAE (`AutoencoderKLMochi`) compresses 8 × 8 pixels and 6 frames into a latent and decodes
/// every latent frame in one call, in tiles of 256 pixels under `enable_tiling()`.
fn mochi() -> Pipeline {
    Pipeline {
        denoiser: "mochi-1-transformer",
        encoders: &[Encoder::T5],
        vae: "mochi-vae",
        hidden: 3072,
        text_tokens: 256,
        tokens_note: "T5 max_sequence_length 256 (MochiPipeline default)",
        cfg: "true",
        rope_fp32: None,
        unet: None,
        vae_upcast: None,
        video: Some(VideoDefaults {
            frames: 19,
            width: 848,
            height: 480,
            size_note: "848 x 480 (MochiPipeline default)",
            frames_note: "19 frames (MochiPipeline default)",
            tile: (256, 256),
            caches_by_release: false,
            script_tiles: None,
            named_sizes: &[("480p", (848, 480))],
            temporal: 6,
        }),
        extra: "    ffn           16384  # SwiGLU: the 2 x 8192 projection, its SiLU half and the product\n    \
                video_vae     mochi\n",
        vae_fp32: None,
        side: None,
        guidance_off: None,
    }
}

/// The FLUX.1 pipeline (FluxPipeline: max_sequence_length 512 by default; the transformer is
/// guidance-distilled, so guidance is an embedding and there is no second batch).
fn flux() -> Pipeline {
    Pipeline {
        denoiser: "flux1-dev-transformer",
        encoders: &[Encoder::T5, Encoder::ClipL],
        vae: "flux-vae",
        hidden: 3072,
        text_tokens: 512,
        tokens_note: "T5 max_sequence_length 512 (FluxPipeline default)",
        cfg: "false",
        rope_fp32: Some(
            "diffusers apply_rotary_emb in FluxAttnProcessor: x.float() * cos + \
             x_rotated.float() * sin",
        ),
        unet: None,
        vae_upcast: None,
        video: None,
        extra: "",
        vae_fp32: None,
        side: Some((
            1024,
            "1024 x 1024 (FluxPipeline default: default_sample_size 128 x vae_scale_factor 8)",
        )),
        guidance_off: None,
    }
}

/// A pipeline named by its usual spellings (`runwayml/stable-diffusion-v1-5`, `SDXL base 1.0`,
/// `FLUX.1 [schnell]`), for wordings the table does not list.
fn recognised(model: &str) -> Option<Pipeline> {
    let name = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    let text: String = name.chars().filter(char::is_ascii_alphanumeric).collect();
    let has = |keys: &[&str]| keys.iter().any(|k| text.contains(k));
    // "FLUX.1", "Flux-dev", "flux schnell": the 1 is often left out (FLUX.2 keeps its 2).
    if has(&["flux1kontext", "fluxkontext"]) {
        // FluxKontextPipeline: FLUX.1-dev's transformer, the reference image's latents packed
        // beside the generated ones in one sequence, the reference first resized to about one
        // megapixel (PREFERRED_KONTEXT_RESOLUTIONS): 4,096 more tokens of 2 × 2 patches, which
        // the step holds as it holds the text's.
        Some(Pipeline {
            text_tokens: 512 + 4096,
            tokens_note: "512 T5 tokens + the reference image's 4,096 latent patches at about \
                          1024 x 1024 (FluxKontextPipeline)",
            ..flux()
        })
    } else if has(&["flux1dev", "flux1schnell", "flux1filldev", "fluxdev", "fluxschnell"]) {
        // FLUX.1-schnell is FLUX.1-dev's transformer without the guidance embedder
        // (`guidance_embeds` false): counted with it, about 13 M parameters more. FLUX.1-Fill's
        // takes 384 input channels (the latents, the masked image's and the mask's) where
        // FLUX.1-dev's takes 64: 1 M parameters more, counted as FLUX.1-dev's.
        Some(flux())
    } else if (has(&["stablediffusionxl", "sdxl"]) && !has(&["refiner"]))
        // Playground v2.5 "follows the same architecture as Stable Diffusion XL" (its model
        // card) and loads through StableDiffusionXLPipeline.
        || has(&["playgroundv25"])
    {
        // SDXL Turbo: "the exact same architecture as SDXL", run with guidance_scale=0.0 and
        // trained for 512 × 512 (diffusers docs, api/pipelines/stable_diffusion/sdxl_turbo.md).
        let turbo = has(&["sdxlturbo"]);
        Some(Pipeline {
            denoiser: "sdxl-unet",
            encoders: &[Encoder::ClipL, Encoder::ClipG],
            vae: "sdxl-vae",
            hidden: 320,
            text_tokens: 77,
            tokens_note: "77 CLIP tokens (StableDiffusionXLPipeline)",
            cfg: "true",
            rope_fp32: None,
            unet: Some(SDXL_UNET),
            vae_upcast: (!has(&["fp16fix"])).then_some(
                "StableDiffusionXLPipeline upcasts a 16-bit VAE whose config says \
                 force_upcast (SDXL base 1.0's does) to fp32 for the decode",
            ),
            video: None,
            extra: "",
            vae_fp32: None,
            side: Some(if turbo {
                (512, "512 x 512 (SDXL Turbo's default size, diffusers' sdxl_turbo guide)")
            } else {
                (
                    1024,
                    "1024 x 1024 (StableDiffusionXLPipeline default: SDXL base's UNet \
                     sample_size 128 x the VAE's factor 8)",
                )
            }),
            guidance_off: turbo.then_some(TURBO_GUIDANCE),
        })
    } else if has(&[
        "stablediffusionv15",
        "stablediffusion15",
        "stablediffusionv14",
        "sdv15",
        "sd15",
        "sdv14",
        "sd14",
    ]) {
        Some(Pipeline {
            denoiser: "sd14-unet",
            encoders: &[Encoder::ClipL],
            vae: "sd-vae",
            hidden: 320,
            text_tokens: 77,
            tokens_note: "77 CLIP tokens (StableDiffusionPipeline)",
            cfg: "true",
            rope_fp32: None,
            unet: Some(SD1_UNET),
            vae_upcast: None,
            video: None,
            extra: "",
            vae_fp32: None,
            side: Some((
                512,
                "512 x 512 (StableDiffusionPipeline default: the v1 UNet's sample_size 64 x the VAE's factor 8)",
            )),
            guidance_off: None,
        })
    } else if has(&["stablediffusion2", "stablediffusionv2", "sd21", "sdv21"])
        && !has(&["inpaint", "depth", "unclip", "upscale"])
    {
        // SD 2.0 and 2.1 (768-v and 512-base) share the UNet, text encoder and autoencoder.
        pipeline("stabilityai/stable-diffusion-2-1").ok().map(|sd2| {
            if has(&["base"]) { Pipeline { side: Some((512, SD2_BASE_SIDE)), ..sd2 } } else { sd2 }
        })
    } else if has(&["sdturbo"]) {
        // SD-Turbo: SD 2.1 distilled, run like SDXL Turbo (diffusers' sdxl_turbo guide; the
        // model card's `guidance_scale=0.0`) at 512 × 512.
        pipeline("stabilityai/stable-diffusion-2-1").ok().map(|sd2| Pipeline {
            side: Some((512, SD2_BASE_SIDE)),
            guidance_off: Some(TURBO_GUIDANCE),
            ..sd2
        })
    } else if has(&["stablediffusion3medium", "sd3medium"]) {
        pipeline("stabilityai/stable-diffusion-3-medium-diffusers").ok()
    } else if has(&["stablediffusion35large", "sd35large"]) {
        // Large Turbo has the same transformer, guidance-distilled: its model card runs
        // guidance_scale=0.0.
        pipeline("stabilityai/stable-diffusion-3.5-large").ok().map(|large| Pipeline {
            guidance_off: has(&["turbo"]).then_some(TURBO_GUIDANCE),
            ..large
        })
    } else if has(&["stablediffusion35medium", "sd35medium"]) {
        pipeline("stabilityai/stable-diffusion-3.5-medium").ok()
    } else if has(&["cogvideox155b"]) && !has(&["i2v"]) {
        // CogVideoX1.5-5B, text to video (its I2V checkpoint takes the image's latents too).
        Some(cogvideox_1_5())
    } else if has(&["cogvideox5b"]) {
        pipeline("THUDM/CogVideoX-5b").ok()
    } else if has(&["cogvideox2b"]) {
        pipeline("THUDM/CogVideoX-2b").ok()
    } else if has(&["wan21"]) && !has(&["i2v", "flf2v", "vace"]) && has(&["13b"]) {
        // Wan 2.1's text-to-video checkpoints, in any spelling ("Wan2.1-T2V-1.3B").
        pipeline("Wan-AI/Wan2.1-T2V-1.3B-Diffusers").ok()
    } else if has(&["wan21"]) && !has(&["i2v", "flf2v", "vace"]) && has(&["14b"]) {
        pipeline("Wan-AI/Wan2.1-T2V-14B-Diffusers").ok()
    } else if has(&["wan22"]) && has(&["t2va14b"]) {
        // Wan 2.2's text-to-video A14B: two experts of Wan 2.1 14B's architecture (the
        // repository's wan/configs/wan_t2v_A14B.py: dim 5120, ffn_dim 13824, 40 heads, 40
        // layers, `high_noise_model` and `low_noise_model`, boundary 0.875), with Wan 2.1's VAE
        // and umT5; diffusers' WanPipeline loads them as `transformer` and `transformer_2`.
        Some(wan(
            "wan21-t2v-14b-transformer",
            5120,
            "    ffn           13824\n    video_vae     wan\n    vae_channels  96\n    \
             denoiser_experts 2  # the high-noise and low-noise experts\n",
        ))
    } else if has(&["ltx"]) && has(&["097", "13b"]) && !has(&["i2v", "upscal"]) {
        // LTX-Video 0.9.7's 13 B checkpoints ("LTX-Video 0.9.7 dev", "ltxv-13b-0.9.7-distilled").
        Some(ltx_video(LtxRelease::V097))
    } else if has(&["ltxvideo", "ltxv"]) && !has(&["i2v", "imagetovideo", "upscal"]) {
        // LTX-Video's 2 B checkpoints, by the release they name: Lightricks/LTX-Video's own
        // diffusers folders hold 0.9.0 (its VAE a 512-channel decoder without timestep
        // conditioning, as utensils/mold#180 reads them; the diffusers docs pair the repository
        // with the ltx-video-2b-v0.9 GGUF), 0.9.1 has its own decoder, and 0.9.5 to 0.9.8 share
        // 0.9.5's (get_vae_config: 0.9.7's is 0.9.5's; 0.9.6 and 0.9.8 assumed alike).
        Some(ltx_video(if has(&["091"]) {
            LtxRelease::V091
        } else if has(&["095", "096", "098"]) {
            LtxRelease::V095
        } else {
            LtxRelease::V090
        }))
    } else if has(&["hunyuanvideo"])
        && !has(&["i2v", "image2video", "15", "framepack", "skyreels", "avatar", "custom"])
    {
        // HunyuanVideo's text-to-video checkpoint ("tencent/HunyuanVideo",
        // "hunyuanvideo-community/HunyuanVideo"); not its image-to-video, 1.5 or derived models.
        Some(hunyuan_video())
    } else if has(&["qwenimage"]) && !has(&["edit", "layered"]) {
        // Qwen-Image's text-to-image checkpoints ("Qwen/Qwen-Image", "Qwen-Image-2512"); not
        // the editing ones, which encode a reference image too.
        Some(qwen_image())
    } else if has(&["pixartsigma"]) {
        pipeline("PixArt-alpha/PixArt-Sigma-XL-2-1024-MS").ok()
    } else if has(&["pixartxl21024", "pixartalpha"]) && !has(&["512", "256"]) {
        // The 1024 × 1024 multi-scale checkpoint; the 512 and 256 ones differ in their
        // micro-conditions and position table.
        pipeline("PixArt-alpha/PixArt-XL-2-1024-MS").ok()
    } else {
        None
    }
}

/// A guidance-distilled ("turbo") checkpoint's documented setting.
const TURBO_GUIDANCE: &str = "a guidance-distilled (turbo) checkpoint, run as its model card \
                              runs it with guidance_scale=0.0: no unconditional batch";

/// Stable Diffusion 2.x's 512 × 512 checkpoints (2-base, 2-1-base, SD-Turbo).
const SD2_BASE_SIDE: &str =
    "512 x 512 (StableDiffusionPipeline default: the 512-base UNet's sample_size 64 x 8)";

/// The pipeline for a `model` wording, or the gaps that stop it.
pub(super) fn pipeline(model: &str) -> Result<Pipeline, Vec<Gap>> {
    match model.trim() {
        // FluxPipeline: max_sequence_length 512 (stated by S18, the pipeline's default for S19);
        // the transformer is guidance-distilled (guidance is an embedding, no second batch).
        "black-forest-labs/FLUX.1-dev" => Ok(flux()),
        // StableDiffusion3Pipeline: the joint attention sees 77 CLIP tokens and 256 T5 tokens
        // (max_sequence_length default 256); hidden 24 heads × 64 (transformer config.json).
        "stabilityai/stable-diffusion-3-medium-diffusers" => {
            Ok(sd3("sd3-medium-transformer", 1536))
        }
        // SD 3.5 transformer/config.json (huggingface/candle
        // candle-transformers/src/models/mmdit/model.rs @ 19679b778297094e14ab1dae39e55b431357c414,
        // `Config::sd3_5_large` and `sd3_5_medium`; the configs as recorded in public loaders,
        // code index ids 60107050060 and 53668838869): Large 38 layers of 38 heads × 64 = 2432,
        // Medium 24 layers of 24 × 64 = 1536 (MMDiT-X: `dual_attention_layers` 0-12, a second
        // image-only attention whose weights models.vram counts; the step's tensors are the
        // generic transformer block's, as for SD3 Medium). Same text encoders, VAE and pipeline
        // as SD3 Medium (StableDiffusion3Pipeline).
        "stabilityai/stable-diffusion-3.5-large" => Ok(sd3("sd35-large-transformer", 2432)),
        "stabilityai/stable-diffusion-3.5-medium" => Ok(sd3("sd35-medium-transformer", 1536)),
        // PixArtSigmaPipeline: max_sequence_length 300; hidden 1152 (PixArt XL/2).
        "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS" => Ok(pixart(
            "pixart-sigma-xl-2",
            "sdxl-vae",
            300,
            "T5 max_sequence_length 300 (PixArtSigmaPipeline default)",
        )),
        // PixArtAlphaPipeline (pipeline_pixart_alpha.py at 58eb52c): max_sequence_length 120 by
        // default; the transformer is PixArt XL/2 (28 layers, 16 heads × 72 = 1152,
        // scripts/convert_pixart_alpha_to_diffusers.py), the autoencoder the SD 1.x one
        // (`sd-vae-ft-ema`, the same script), the encoder T5 v1.1 XXL (`t5-v1_1-xxl`).
        "PixArt-alpha/PixArt-XL-2-1024-MS" => Ok(pixart(
            "pixart-alpha-xl-2",
            "sd-vae",
            120,
            "T5 max_sequence_length 120 (PixArtAlphaPipeline default)",
        )),
        // StableDiffusionPipeline with SD 2.1's UNet (SD2_UNET, hidden 320), its OpenCLIP ViT-H
        // text encoder over 77 tokens and the SD 1.x autoencoder architecture (vae/config.json,
        // candle's `v2_1`: block_out_channels 128 256 512 512, 4 latent channels);
        // `guidance_scale` 7.5; no VAE upcast in StableDiffusionPipeline.
        "stabilityai/stable-diffusion-2-1" => Ok(Pipeline {
            denoiser: "sd21-unet",
            encoders: &[Encoder::ClipH],
            vae: "sd-vae",
            hidden: 320,
            text_tokens: 77,
            tokens_note: "77 CLIP tokens (StableDiffusionPipeline)",
            cfg: "true",
            rope_fp32: None,
            unet: Some(SD2_UNET),
            vae_upcast: None,
            video: None,
            extra: "",
            vae_fp32: None,
            side: Some((
                768,
                "768 x 768 (StableDiffusionPipeline default: SD 2.1's UNet sample_size 96 x the VAE's factor 8)",
            )),
            guidance_off: None,
        }),
        // CogVideoX-2b and -5b transformer/config.json: 30 heads × 64 = 1920 and 48 × 64 = 3072.
        "THUDM/CogVideoX-5b" => Ok(cogvideox("cogvideox-5b-transformer", 3072)),
        "THUDM/CogVideoX-2b" => Ok(cogvideox("cogvideox-2b-transformer", 1920)),
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers" | "Wan-AI/Wan2.1-T2V-1.3B" => Ok(wan(
            "wan21-t2v-1.3b-transformer",
            1536,
            "    ffn           8960\n    video_vae     wan\n    vae_channels  96\n",
        )),
        "Lightricks/LTX-Video-0.9.7-dev"
        | "Lightricks/LTX-Video-0.9.7-distilled"
        | "Lightricks/ltxv-13b-0.9.7-dev"
        | "Lightricks/ltxv-13b-0.9.7-distilled" => Ok(ltx_video(LtxRelease::V097)),
        "genmo/mochi-1-preview" => Ok(mochi()),
        // SanaMS_1600M_P1_D20 (70 heads × 32 = 2240) and SanaMS_600M_P1_D28 (36 × 32 = 1152).
        // The 512-pixel, 2K and 4K checkpoints are the same transformers (their position
        // embeddings are sine-cosine tables, no parameters: convert_sana_to_diffusers.py's
        // `interpolation_scale`); SanaPipeline's default size stays 1024 × 1024 for all.
        "Efficient-Large-Model/Sana_1600M_1024px_diffusers"
        | "Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers"
        | "Efficient-Large-Model/Sana_1600M_1024px_MultiLing_diffusers"
        | "Efficient-Large-Model/Sana_1600M_512px_diffusers"
        | "Efficient-Large-Model/Sana_1600M_2Kpx_BF16_diffusers"
        | "Efficient-Large-Model/Sana_1600M_4Kpx_BF16_diffusers" => Ok(sana(
            "sana-1600m-transformer",
            2240,
            "    ffn           11200  # GLU MBConv: 2 x 2.5 x 2240\n    image_vae     dc-ae\n",
        )),
        "Efficient-Large-Model/Sana_600M_1024px_diffusers"
        | "Efficient-Large-Model/Sana_600M_512px_diffusers" => Ok(sana(
            "sana-600m-transformer",
            1152,
            "    ffn           5760  # GLU MBConv: 2 x 2.5 x 1152\n    image_vae     dc-ae\n",
        )),
        "Wan-AI/Wan2.1-T2V-14B-Diffusers" | "Wan-AI/Wan2.1-T2V-14B" => Ok(wan(
            "wan21-t2v-14b-transformer",
            5120,
            "    ffn           13824\n    video_vae     wan\n    vae_channels  96\n",
        )),
        other => recognised(other).ok_or_else(|| {
            vec![Gap::feature(
                feature::PIPELINE,
                format!("{other}: no pipeline in crates/accuracy/src/express/pipelines.rs"),
            )]
        }),
    }
}
