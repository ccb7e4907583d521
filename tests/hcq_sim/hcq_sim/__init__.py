"""A simulated HCQ2 device ("SIM"): the worked example of how to write a queue device for tinycore."""
