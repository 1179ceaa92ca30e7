DROP TABLE inbox_views;
