"""Paper studies: each module computes a paper's figures and writes them with their data.

Studies sit at the edge with the command line (they write files); the kernels they call stay
pure.
"""
