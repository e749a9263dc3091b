"""What the tests share: managers per allocator, seams into the manager, scenes to draw,
the original's algorithm and its planted bugs, and the runners of notebooks, ranks and
user modules. Test modules import it as ``support.<module>``."""
