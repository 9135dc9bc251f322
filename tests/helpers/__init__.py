"""What several test modules share: prerequisites, the browser, planted truths, hostile inputs.

Test modules import from here (or from a conftest), never from one another: a test module that is
skipped, or fails to import, then takes no other module's tests with it."""
