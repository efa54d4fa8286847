//! A walker that reports no samples: used when the CPython walker cannot run in this
//! interpreter, so the span hooks and exporters still work (and the reason is in `stats()`).

use span_profile_core::{Frame, RawFrame, StackSink, StackWalker};

#[derive(Debug, Default)]
pub(crate) struct NoSamples;

impl StackWalker for NoSamples {
    fn walk(&mut self, _sink: &mut dyn StackSink) {}

    fn symbolize(&mut self, _raw: RawFrame) -> Frame {
        Frame::new("[unknown]", "", 0)
    }
}

/// Any walker, boxed, so the choice can be made at run time.
pub(crate) struct Boxed(pub(crate) Box<dyn StackWalker>);

impl std::fmt::Debug for Boxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Boxed(StackWalker)")
    }
}

impl StackWalker for Boxed {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        self.0.walk(sink);
    }
    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        self.0.symbolize(raw)
    }
    fn on_start(&mut self) {
        self.0.on_start();
    }
}
