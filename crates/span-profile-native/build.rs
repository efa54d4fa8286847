//! Tells the crate (and its tests) whether it is built with frame pointers, which the
//! frame-pointer unwinder needs: `RUSTFLAGS="-C force-frame-pointers=yes"`.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(span_profile_frame_pointers)");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let mut it = flags.split('\x1f').peekable();
    let mut on = false;
    while let Some(f) = it.next() {
        let v = match f {
            "-C" | "--codegen" => it.next().unwrap_or(""),
            f => f.strip_prefix("-C").unwrap_or(""),
        };
        match v {
            "force-frame-pointers=yes"
            | "force-frame-pointers=y"
            | "force-frame-pointers=on"
            | "force-frame-pointers=true"
            | "force-frame-pointers" => on = true,
            v if v.starts_with("force-frame-pointers=") => on = false,
            _ => {}
        }
    }
    if on {
        println!("cargo::rustc-cfg=span_profile_frame_pointers");
    }
}
