"""Code sync: the caller's source tree, content-addressed, packed, carried to every node, unpacked
into a directory per digest that the node's processes import from. Standard library only."""
