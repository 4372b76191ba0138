use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::{
    arrow::datatypes::SchemaRef, catalog::CatalogProviderList, datasource::TableType,
    error::DataFusionError,
};

/// Define the interface for retrieve catalog data for pg_catalog tables
#[async_trait]
pub trait CatalogInfo: Clone + Send + Sync + Debug + 'static {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError>;

    async fn schema_names(
        &self,
        catalog_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError>;

    async fn table_names(
        &self,
        catalog_name: &str,
        schema_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError>;

    async fn table_schema(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError>;

    async fn table_type(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<TableType>, DataFusionError>;
}

#[async_trait]
impl CatalogInfo for Arc<dyn CatalogProviderList> {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        Ok(CatalogProviderList::catalog_names(self.as_ref()))
    }

    async fn schema_names(
        &self,
        catalog_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(self.catalog(catalog_name).map(|c| c.schema_names()))
    }

    async fn table_names(
        &self,
        catalog_name: &str,
        schema_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(self
            .catalog(catalog_name)
            .and_then(|c| c.schema(schema_name))
            .map(|s| s.table_names()))
    }

    async fn table_schema(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        let schema = self
            .catalog(catalog_name)
            .and_then(|c| c.schema(schema_name));
        if let Some(schema) = schema {
            let table_schema = schema.table(table_name).await?.map(|t| t.schema());
            Ok(table_schema)
        } else {
            Ok(None)
        }
    }

    async fn table_type(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        let schema = self
            .catalog(catalog_name)
            .and_then(|c| c.schema(schema_name));
        if let Some(schema) = schema {
            let table_type = schema.table_type(table_name).await?;
            Ok(table_type)
        } else {
            Ok(None)
        }
    }
}

/// The session's catalog list, held weakly (tablegate patch): the
/// pg_catalog schema is registered inside the very catalog list it
/// describes, so holding it strongly made a reference cycle that leaked
/// every session's catalogs (several MiB per connection).
#[derive(Clone, Debug)]
pub struct WeakCatalogList(pub std::sync::Weak<dyn CatalogProviderList>);

impl WeakCatalogList {
    fn list(&self) -> Result<Arc<dyn CatalogProviderList>, DataFusionError> {
        self.0.upgrade().ok_or_else(|| {
            DataFusionError::Internal("the session's catalog list is gone".to_string())
        })
    }
}

#[async_trait]
impl CatalogInfo for WeakCatalogList {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        CatalogInfo::catalog_names(&self.list()?).await
    }

    async fn schema_names(
        &self,
        catalog_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        CatalogInfo::schema_names(&self.list()?, catalog_name).await
    }

    async fn table_names(
        &self,
        catalog_name: &str,
        schema_name: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        CatalogInfo::table_names(&self.list()?, catalog_name, schema_name).await
    }

    async fn table_schema(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        CatalogInfo::table_schema(&self.list()?, catalog_name, schema_name, table_name).await
    }

    async fn table_type(
        &self,
        catalog_name: &str,
        schema_name: &str,
        table_name: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        CatalogInfo::table_type(&self.list()?, catalog_name, schema_name, table_name).await
    }
}

pub fn table_type_to_string(tt: &TableType) -> String {
    match tt {
        TableType::Base => "r".to_string(),
        TableType::View => "v".to_string(),
        TableType::Temporary => "r".to_string(),
    }
}
