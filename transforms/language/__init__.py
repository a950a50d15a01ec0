"""Language annotations (columns and their validation), LeRobot training recipes, resolvers and
rendering. Pure: no Beam."""
