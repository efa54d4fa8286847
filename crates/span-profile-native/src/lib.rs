//! Native stack walker (being written).
