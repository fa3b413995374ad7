"""Reading blocks: blk*.dat files, best-chain selection, bitcoind RPC, and the block parser."""
