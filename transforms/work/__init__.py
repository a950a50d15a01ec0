"""The import's work, without Beam: what each step of the import does with one element, and the elements
the steps pass (`messages`). The Beam steps at the top of `transforms` are thin adapters over these
classes and functions: they make the counters, hold a worker's state between elements, and hand the
results on; everything they decide is here, and is tested without a pipeline.
"""
