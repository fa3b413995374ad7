"""brk: Bitcoin blockchain datasets from a node's block files."""
