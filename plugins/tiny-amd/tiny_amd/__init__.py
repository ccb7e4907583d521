"""tiny-amd: the tinycore AMD GPU device."""
