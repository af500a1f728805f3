//! `vram fmt`: one canonical layout.
