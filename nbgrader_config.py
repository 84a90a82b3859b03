"""nbgrader's configuration for gpulab: the course as nbgrader sees it, read from the repository root by `make lab`
(its Formgrader) and by nbgrader's command line run here (`nbgrader generate_assignment 00_memory_hierarchy`,
`nbgrader autograde ...`). The source of each assignment is its solution notebook, linked as
course/source/NN_name/NN_name.ipynb by `make lab` (gpulab.course.lab.link_course); nbgrader writes release/,
submitted/, autograded/ and the gradebook under course/ (not in git)."""

import os

c = get_config()  # noqa: F821 - defined by the config loader
c.CourseDirectory.course_id = "gpulab"
c.CourseDirectory.root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "course")
c.Execute.timeout = 300  # a lesson notebook runs in under a minute on CPU
