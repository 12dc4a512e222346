"""Discovery and attaching: CUDA objects found in processes' maps, read off the collector's path,
probed, detached; code ranges."""
