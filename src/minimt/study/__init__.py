"""The embedding study: TensorBoard views (a training hook), length tests, significance, reports."""
